#!/usr/bin/env bash
# Checks that the C++ files a change touches follow .clang-format (Google,
# 100 columns). Only touched files are checked; the tree is never reformatted
# wholesale.
#   scripts/check_format.sh          check the touched files (exit 1 if any is unformatted)
#   scripts/check_format.sh --fix    reformat the touched files in place
#   scripts/check_format.sh FILE...  check the C++ files among these instead
#
# "Touched" = what differs between the working tree (staged, unstaged and
# untracked files) and a base commit:
#   - LOOM_FORMAT_BASE=<rev> when set;
#   - else the merge-base with origin/main, when HEAD has commits beyond it
#     (a branch under review);
#   - else HEAD~1, i.e. the last commit plus uncommitted changes (a fresh clone
#     of main in CI checks the files of its last commit);
#   - a shallow clone without HEAD~1 checks uncommitted changes only; the
#     first commit of a repository checks all its files.
# Outside a git work tree it skips with a note. Exit status: 0 formatted or
# skipped, 1 some file unformatted, 2 the check itself could not run.
set -euo pipefail
cd "$(dirname "$0")/.."

FIX=0
if [[ ${1:-} == --fix ]]; then
  FIX=1
  shift
fi

if ! command -v clang-format >/dev/null; then
  echo "format check: clang-format is not installed (scripts/setup.sh installs Debian's)" >&2
  exit 2
fi

is_cxx() { [[ $1 =~ \.(h|hh|hpp|hxx|inc|c|cc|cpp|cxx|cu|cuh)$ && $1 != third_party/* ]]; }

files=()
if (($#)); then
  for f in "$@"; do is_cxx "$f" && files+=("$f"); done
  what="among the files given"
else
  if ! command -v git >/dev/null || ! top=$(git rev-parse --show-toplevel 2>/dev/null) ||
    [[ $(cd "$top" && pwd -P) != $(pwd -P) ]]; then
    echo "format check: not a git work tree, skipped (run scripts/check_format.sh FILE... to check files)"
    exit 0
  fi
  empty_tree=$(git hash-object -t tree /dev/null)
  head=$(git rev-parse -q --verify 'HEAD^{commit}' || true)
  if [[ -n ${LOOM_FORMAT_BASE:-} ]]; then
    base=$(git rev-parse -q --verify "$LOOM_FORMAT_BASE^{commit}") || {
      echo "format check: LOOM_FORMAT_BASE=$LOOM_FORMAT_BASE is not a commit" >&2
      exit 2
    }
    what="changed since $LOOM_FORMAT_BASE"
  elif [[ -z $head ]]; then
    base=$empty_tree
    what="in a repository without commits"
  elif merge_base=$(git merge-base HEAD origin/main 2>/dev/null) && [[ $merge_base != "$head" ]]; then
    base=$merge_base
    what="changed since the merge-base with origin/main (${merge_base:0:12})"
  elif git rev-parse -q --verify 'HEAD~1^{commit}' >/dev/null; then
    base=$(git rev-parse HEAD~1)
    what="changed by the last commit (${head:0:12}) or not yet committed"
  elif [[ $(git rev-parse --is-shallow-repository) == true ]]; then
    base=$head
    what="not yet committed"
    echo "format check: shallow clone, the last commit's parent is missing; checking uncommitted changes only"
  else
    base=$empty_tree
    what="in the first commit or not yet committed"
  fi
  while IFS= read -r -d '' f; do
    is_cxx "$f" && [[ -f $f ]] && files+=("$f")
  done < <(git diff --name-only --no-renames --diff-filter=d -z "$base" --;
           git ls-files --others --exclude-standard -z)
fi

if ((${#files[@]} == 0)); then
  echo "format check: no C++ files $what"
  exit 0
fi

if ((FIX)); then
  clang-format -i --style=file "${files[@]}"
  echo "format check: reformatted ${#files[@]} C++ file(s) $what"
  exit 0
fi

bad=()
for f in "${files[@]}"; do
  if ! out=$(clang-format --dry-run -Werror --style=file "$f" 2>&1); then
    if grep -q 'code should be clang-formatted' <<<"$out"; then
      bad+=("$f")
    else
      echo "format check: clang-format failed on $f:" >&2
      echo "$out" >&2
      exit 2
    fi
  fi
done

if ((${#bad[@]} == 0)); then
  echo "format check: ${#files[@]} C++ file(s) $what are formatted"
  exit 0
fi

{
  echo "format check: FAILED: ${#bad[@]} of ${#files[@]} C++ file(s) $what are not formatted"
  echo "($(clang-format --version | head -n1); .clang-format at the repository root):"
  for f in "${bad[@]}"; do
    echo "--- $f (first differences)"
    clang-format --style=file "$f" | diff -u "$f" - | sed -n '3,22p' || true
  done
  echo
  echo "Not formatted:"
  printf '  %s\n' "${bad[@]}"
  echo "Fix with:"
  echo "  clang-format -i ${bad[*]}"
} >&2
exit 1
