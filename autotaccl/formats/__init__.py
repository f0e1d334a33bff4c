"""Runtime formats: what an algorithm is lowered to, the checkers that replay those files, and which
runtime loads a schedule (``loading``, for synthesis)."""
