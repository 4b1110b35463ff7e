#!/usr/bin/env python3
"""Writes a ragged prompt file: JSONL lines {"prompt_token_ids": [...], "max_tokens": N}
with prompt lengths and max_tokens drawn uniformly from the given ranges, from a fixed
seed (the same file on every machine and Python 3 version).

    make_ragged_prompts.py [--count 200] [--min-len 8] [--max-len 512]
                           [--min-tokens 4] [--max-tokens 128] [--vocab 8192]
                           [--seed 14] > prompts.jsonl

Token ids are drawn from [3, vocab) so that no prompt holds OPT's special ids 0-2.
Only the Python standard library.
"""
import argparse
import json
import random
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--min-len", type=int, default=8)
    parser.add_argument("--max-len", type=int, default=512)
    parser.add_argument("--min-tokens", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    if not (1 <= args.min_len <= args.max_len and 1 <= args.min_tokens <= args.max_tokens and args.vocab > 3):
        parser.error("need 1 <= min-len <= max-len, 1 <= min-tokens <= max-tokens and vocab > 3")
    rng = random.Random(args.seed)
    for _ in range(args.count):
        length = rng.randint(args.min_len, args.max_len)
        ids = [rng.randrange(3, args.vocab) for _ in range(length)]
        max_tokens = rng.randint(args.min_tokens, args.max_tokens)
        sys.stdout.write(json.dumps({"prompt_token_ids": ids, "max_tokens": max_tokens}, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
