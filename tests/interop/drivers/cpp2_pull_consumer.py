#!/usr/bin/env python3
"""pull consumer driver for the RocketMQ C++ client 2.1.0 (PyPI rocketmq-python-cvs==2.1.0.3).

Run with .venv-interop-cpp2/bin/python; `--help` lists the options, the
output contract is in _cpp_driver.py and tests/interop/README.md.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cpp_driver import pull_main

if __name__ == "__main__":
    sys.exit(pull_main("cpp2"))
