"""The benchmarks, each run from the checkout as ``python -m bench.NAME`` (``bench/README.md``
lists them and the result file each writes; the device checks are tests, in ``tests/device``)."""
