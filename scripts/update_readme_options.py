#!/usr/bin/env python3
"""Rewrites README.md's table of MEMWEAVE_* variables from `memweave config --markdown`
(the one table in core/config.cpp). tests/core/readme_options_test checks they agree."""
import pathlib
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent
binary = sys.argv[1] if len(sys.argv) > 1 else str(root / "build/release/tools/memweave")
table = subprocess.run([binary, "config", "--markdown"], check=True, capture_output=True,
                       text=True).stdout.rstrip("\n")
readme = root / "README.md"
text = readme.read_text()
start = text.index("| variable | default | meaning |")
end = text.find("\n\n", start)
end = len(text) if end < 0 else end
readme.write_text(text[:start] + table + text[end:])
