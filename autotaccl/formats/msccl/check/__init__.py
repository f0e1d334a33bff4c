"""Reading MSCCL XML: a strict parser, static rules, a symbolic replay, and import to the IR."""
