"""Runtime formats: what an algorithm is lowered to, and the checkers that replay those files."""
