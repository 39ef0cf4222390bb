"""`depthattn serve` whose model raises inside generation when the tokens hold FAULT_TOKEN (the first argument):
a failure no request check can catch, to see what the server does then. Used by test_serve_faults.py only."""

import os
import sys

from depthattn.cli import main
from depthattn.modeling import DepthAttentionForCausalLM

if __name__ == "__main__":  # the token to the environment, where the model's own process (5.25 on) finds it too
    os.environ["DEPTHATTN_FAULT_TOKEN"] = sys.argv.pop(1)
FAULT_TOKEN = int(os.environ["DEPTHATTN_FAULT_TOKEN"])
_forward = DepthAttentionForCausalLM.forward


def failing_forward(self, input_ids=None, *args, **kwargs):
    if input_ids is not None and (input_ids == FAULT_TOKEN).any():
        raise RuntimeError(f"injected fault: token {FAULT_TOKEN}")
    return _forward(self, input_ids, *args, **kwargs)


DepthAttentionForCausalLM.forward = failing_forward

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
