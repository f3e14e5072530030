// Reference ids from the Hugging Face tokenizers library (Rust, through the
// @anush008/tokenizers Node binding), for loom's tokenizer tests and bench.
//   node hf_reference.js encode TOKENIZER_JSON CORPUS_JSONL
//     -> one line {"text": s, "ids": [...], "decoded": d} per corpus string
//        (add_special_tokens = false, like loom's Tokenizer::Encode)
//   node hf_reference.js bench TOKENIZER_JSON CORPUS_JSONL
//     -> one JSON line with single-thread MB/s and tokens/s
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '../..');
const { Tokenizer } = require(path.join(root, 'third_party/npm/node_modules/@anush008/tokenizers'));

function readCorpus(file) {
  return fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
}

async function encodeAll(tokenizer, texts) {
  const out = [];
  for (const text of texts) {
    const e = await tokenizer.encode(text, null, { addSpecialTokens: false });
    out.push(e.getIds());
  }
  return out;
}

async function main() {
  const [mode, tokenizerFile, corpusFile] = process.argv.slice(2);
  const tokenizer = Tokenizer.fromFile(tokenizerFile);
  const texts = readCorpus(corpusFile);
  if (mode === 'encode') {
    const ids = await encodeAll(tokenizer, texts);
    for (let i = 0; i < texts.length; ++i) {
      const decoded = await tokenizer.decode(ids[i], false);
      process.stdout.write(JSON.stringify({ text: texts[i], ids: ids[i], decoded }) + '\n');
    }
  } else if (mode === 'bench') {
    // encodeBatch would use several threads; one encode at a time stays single-threaded.
    await encodeAll(tokenizer, texts.slice(0, 100));  // warm-up
    const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, 'utf8'), 0);
    const start = process.hrtime.bigint();
    const ids = await encodeAll(tokenizer, texts);
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    const tokens = ids.reduce((n, a) => n + a.length, 0);
    console.log(JSON.stringify({ impl: 'hf-tokenizers', bytes, tokens, seconds,
      mb_per_s: bytes / 1e6 / seconds, tokens_per_s: tokens / seconds }));
  } else {
    console.error('usage: node hf_reference.js encode|bench TOKENIZER_JSON CORPUS_JSONL');
    process.exit(2);
  }
}
main().catch((e) => { console.error(String(e)); process.exit(1); });
