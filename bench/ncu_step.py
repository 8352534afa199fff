#!/usr/bin/env python3
"""ncu_step.py CSV [--steps N] [--bw GBPS]: one decode step's kernels from an Nsight Compute CSV.

The CSV: `ncu --csv --page raw --metrics gpu__time_duration.sum,dram__bytes_read.sum,
dram__bytes_write.sum ft bench ... -n N` with FT_CUDA_GRAPHS=0 (so that every kernel of a step
is a launch of its own). The last decode step is the run of launches after the last launch of
the kernel that starts every step's first layer (the first kernel after the previous step's
output head): found as the period of the kernel names at the end of the list. Prints each
kernel kind's launches, time, DRAM bytes and achieved bandwidth against --bw (GB/s, the
device's peak: 3350 for an H100 SXM, 4800 for an H200), summed over the step.
"""
import csv, sys, collections, argparse

ap = argparse.ArgumentParser()
ap.add_argument('csv')
ap.add_argument('--bw', type=float, default=3350.0)
ap.add_argument('--period', type=int, default=0, help='kernels per decode step (0: found)')
a = ap.parse_args()

rows = list(csv.reader(open(a.csv)))
hdr_i = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
hdr = rows[hdr_i]
ki, ti = hdr.index('Kernel Name'), hdr.index('gpu__time_duration.sum')
ri, wi = hdr.index('dram__bytes_read.sum'), hdr.index('dram__bytes_write.sum')
units = rows[hdr_i + 1]
data = [r for r in rows[hdr_i + 2:] if len(r) == len(hdr)]

def num(s):
    return float(s.replace(',', '')) if s else 0.0

scale_t = {'ns': 1e-3, 'nsecond': 1e-3, 'us': 1.0, 'usecond': 1.0, 'ms': 1e3, 'msecond': 1e3}[units[ti]]  # to us
def bscale(u):
    return {'byte': 1, 'Kbyte': 1e3, 'Mbyte': 1e6, 'Gbyte': 1e9}[u]
sr, sw = bscale(units[ri]), bscale(units[wi])

names = [r[ki] + r[hdr.index('Grid Size')] for r in data]  # a kernel and its grid: one launch site
# the step's period: the smallest p whose last two windows agree and end in a launch that
# appears once a step (the output head: a layer's launches repeat within a step)
period = a.period
if not period:
    for p in range(8, len(names) // 2):
        if names[-p:] == names[-2 * p:-p] and names[-p:].count(names[-1]) == 1:
            period = p
            break
if not period:
    sys.exit('ncu_step.py: no repeating decode step found (run ft bench with -n 2 or more)')
step = data[-period:]
tot_t = tot_b = 0.0
agg = collections.OrderedDict()
for r in step:
    n = r[ki].split('(')[0].strip()
    t, b = num(r[ti]) * scale_t, num(r[ri]) * sr + num(r[wi]) * sw
    e = agg.setdefault(n, [0, 0.0, 0.0])
    e[0] += 1; e[1] += t; e[2] += b
    tot_t += t; tot_b += b
print(f'one decode step: {period} kernels, {tot_t:.1f} us of kernel time (each alone), '
      f'{tot_b / 1e6:.1f} MB from and to DRAM, {tot_b / tot_t / 1e3:.0f} GB/s = {tot_b / tot_t / 1e3 / a.bw * 100:.0f}% of {a.bw:.0f}')
print(f'{"kernel":70s} {"n":>4s} {"us":>8s} {"%time":>6s} {"MB":>8s} {"GB/s":>6s} {"%bw":>5s} {"us each":>8s}')
for n, (c, t, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f'{n[:70]:70s} {c:4d} {t:8.1f} {t / tot_t * 100:6.1f} {b / 1e6:8.2f} {b / t / 1e3:6.0f} '
          f'{b / t / 1e3 / a.bw * 100:5.1f} {t / c:8.2f}')
