// Translation unit that carries the LibTorch precompiled header.
