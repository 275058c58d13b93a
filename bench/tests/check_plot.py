#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""plot.py draws PNGs from a record, and refuses a broken record with a message.

check_plot.py PLOT_PY SAMPLE_JSON
"""

import json
import os
import subprocess
import sys
import tempfile

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def main():
    plot, sample = sys.argv[1], sys.argv[2]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("FAIL  matplotlib is not installed: python3 -m pip install matplotlib (tools/dev.sh does it)")
        return 1
    with tempfile.TemporaryDirectory() as out:
        p = subprocess.run([sys.executable, plot, sample, "--out", out], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"FAIL  plot.py exited {p.returncode}:\n{p.stdout}{p.stderr}")
            return 1
        name = os.path.splitext(os.path.basename(sample))[0]
        for suffix in ("latency", "bandwidth"):
            path = os.path.join(out, f"{name}-{suffix}.png")
            if not os.path.isfile(path):
                print(f"FAIL  {path} was not written (plot.py printed: {p.stdout.strip()})")
                return 1
            with open(path, "rb") as f:
                data = f.read()
            if not data.startswith(PNG_SIGNATURE) or len(data) < 10000:
                print(f"FAIL  {path} is not a plausible PNG ({len(data)} bytes)")
                return 1
            print(f"ok    {os.path.basename(path)}: {len(data)} bytes")

        # Two files side by side make one comparison chart pair.
        p = subprocess.run([sys.executable, plot, sample, sample, "--out", out], capture_output=True, text=True)
        if p.returncode != 0 or not os.path.isfile(os.path.join(out, "comparison-latency.png")):
            print(f"FAIL  plotting two files:\n{p.stdout}{p.stderr}")
            return 1
        print("ok    comparison of two files")

        broken = os.path.join(out, "broken.json")
        with open(sample, encoding="utf-8") as f:
            record = json.load(f)
        del record["points"][0]["times"]
        with open(broken, "w", encoding="utf-8") as f:
            json.dump(record, f)
        p = subprocess.run([sys.executable, plot, broken, "--out", out], capture_output=True, text=True)
        if p.returncode == 0 or "missing key 'times'" not in p.stderr:
            print(f"FAIL  plot.py accepted a record without times (exit {p.returncode}):\n{p.stderr}")
            return 1
        print("ok    a broken record is refused: " + p.stderr.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
