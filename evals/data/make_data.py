#!/usr/bin/env python3
"""Rebuild the compact prompt sets in evals/data/ from the copies in shared/data/ (see PROVENANCE.md).

Only the fields an acceptance-length run needs are kept: an id, a category and the user turns
(`turns`, a list of strings) or a single `prompt` string. Texts are copied unchanged.

  python3 evals/data/make_data.py [SHARED_DATA_DIR]   (default: ../shared/data beside the checkout)
"""
import gzip
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "..", "shared", "data")


def write(name, records):
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        for r in records:
            # compact separators, ASCII only: one record per line, and no U+2028 inside lines
            f.write(json.dumps(r, ensure_ascii=True, separators=(",", ":")) + "\n")
    print(f"{name}: {len(records)} records")


def main():
    gsm = [json.loads(l) for l in open(os.path.join(SRC, "gsm8k", "test.jsonl"), encoding="utf-8") if l.strip()]
    write("gsm8k.jsonl", [{"id": i, "category": "math", "turns": [r["question"]]} for i, r in enumerate(gsm)])

    mt = [json.loads(l) for l in open(os.path.join(SRC, "mt_bench", "question.jsonl"), encoding="utf-8") if l.strip()]
    write("mt_bench.jsonl", [{"id": r["question_id"], "category": r["category"], "turns": r["turns"]} for r in mt])

    with gzip.open(os.path.join(SRC, "humaneval", "HumanEval.jsonl.gz"), "rt", encoding="utf-8") as f:
        he = [json.loads(l) for l in f if l.strip()]
    write("humaneval.jsonl", [{"id": r["task_id"], "category": "code", "prompt": r["prompt"]} for r in he])

    mb = json.load(open(os.path.join(SRC, "mbpp", "sanitized-mbpp.json"), encoding="utf-8"))
    mb = sorted((r for r in mb if 11 <= r["task_id"] <= 510), key=lambda r: r["task_id"])  # the test split
    write("mbpp.jsonl", [{"id": r["task_id"], "category": "code", "prompt": r["prompt"]} for r in mb])

    # Spec-Bench is already {question_id, category, turns}: copied byte for byte
    shutil.copyfile(os.path.join(SRC, "spec_bench", "question.jsonl"), os.path.join(HERE, "spec_bench.jsonl"))
    print("spec_bench.jsonl: copied")

    sg = json.load(open(os.path.join(SRC, "sharegpt", "ShareGPT_V3_filtered_500.json"), encoding="utf-8"))
    write("sharegpt.jsonl", [{"id": r["id"], "category": "sharegpt",
                              "turns": [c["value"] for c in r["conversations"] if c["from"] == "human"]}
                             for r in sg])


if __name__ == "__main__":
    main()
