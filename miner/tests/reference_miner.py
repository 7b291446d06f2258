#!/usr/bin/env python3
"""Independent reference implementation of the block algorithm (hashlib only).

Prints one JSON line per block with index, prev, nonce, hash, attempts and
difficulty, exactly the fields `miner chain` must agree on.
Usage: reference_miner.py BLOCKS DIFFICULTY
"""
import hashlib
import json
import sys


def leading_zero_bits(digest: bytes) -> int:
    value = int.from_bytes(digest, "big")
    return 256 - value.bit_length()


def mine(index: int, prev: str, difficulty: int) -> dict:
    nonce = 0
    while True:
        digest = hashlib.sha256(f"{index}:{prev}:{nonce}".encode()).digest()
        if leading_zero_bits(digest) >= difficulty:
            return {
                "index": index,
                "prev": prev,
                "nonce": nonce,
                "hash": digest.hex().upper(),
                "attempts": nonce + 1,
                "difficulty": difficulty,
            }
        nonce += 1


def main() -> None:
    blocks, difficulty = int(sys.argv[1]), int(sys.argv[2])
    prev = "GENESIS"
    for index in range(1, blocks + 1):
        block = mine(index, prev, difficulty)
        print(json.dumps(block), flush=True)
        prev = block["hash"]


if __name__ == "__main__":
    main()
