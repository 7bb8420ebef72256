"""Phases of one kernel launch from Nsight Compute's source page (SASS, CSV): the instructions between two
block-wide syncs (BAR), with their share of the warp-stall samples and their lane instructions per token.

Usage: python ncu_phases.py ncu_source_sass.csv.gz ROWS VOCAB   (here: 128 rows of 151936 tokens)
The CSV came from `ncu --import prof.ncu-rep --page source --csv --print-source sass`.
"""

import csv
import gzip
import sys

path, rows, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
table = list(csv.reader(gzip.open(path, "rt")))
head, body = table[1], table[2:]
src, stall = head.index("Source"), head.index("Warp Stall Sampling (All Samples)")
lanes = head.index("Thread Instructions Executed")
segments, start, s, t = [], 0, 0, 0
for k, r in enumerate(body):
    s, t = s + int(r[stall]), t + int(r[lanes])
    if "BAR.SYNC" in r[src] or "BAR.RED" in r[src] or k == len(body) - 1:
        segments.append((start, k, s, t))
        start, s, t = k + 1, 0, 0
total_s, total_t = sum(x[2] for x in segments), sum(x[3] for x in segments)
print(f"lane instructions per token {total_t / (rows * vocab):.1f}, stall samples {total_s}")
for a, b, s, t in segments:
    if s > 0.01 * total_s or t > 0.01 * total_t:
        print(f"SASS {a:6d}-{b:6d}: {100 * s / total_s:5.1f}% of the samples, {t / (rows * vocab):6.1f} lane instr/token")
