# Runs the schemathesis CLI with Python's ast.parse serialised across threads.
#
# schemathesis' workers are threads, and hypothesis parses source files to describe the
# lambdas of its filters. CPython 3.11 keeps the AST constructor's recursion counter in
# state the threads share, so two parses at once can fail with "SystemError: AST
# constructor recursion depth mismatch" (cpython#106905): an error of the tool, not a
# finding about the API under test. One lock around ast.parse keeps both workers.
import ast
import sys
import threading

from schemathesis.cli import schemathesis

_lock = threading.Lock()
_parse = ast.parse


def _serial_parse(*args, **kwargs):
    with _lock:
        return _parse(*args, **kwargs)


ast.parse = _serial_parse

if __name__ == "__main__":
    sys.argv[0] = "schemathesis"
    sys.exit(schemathesis())
