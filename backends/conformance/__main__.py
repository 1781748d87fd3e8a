"""``python -m backends.conformance``: ``sarek conformance`` on its own."""

import argparse
import sys

import backends.conformance
from backends.conformance.cli import add_arguments, main

parser = argparse.ArgumentParser(prog="sarek conformance", description=backends.conformance.__doc__)
add_arguments(parser)
sys.exit(main(parser.parse_args()))
