#!/usr/bin/env python3
"""pull consumer driver for the RocketMQ C++ client 1.x (PyPI rocketmq==0.4.4).

Run with .venv-interop-cpp1/bin/python; `--help` lists the options, the
output contract is in _cpp_driver.py and tests/interop/README.md.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cpp_driver import pull_main

if __name__ == "__main__":
    sys.exit(pull_main("cpp1"))
