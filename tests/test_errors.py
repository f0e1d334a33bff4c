"""errors: what counts as Ctrl-C and as the environment's failure, through chained exceptions."""
import errno

from autotaccl.errors import environment_problem, interrupted, stop_status


def _raised_while_handling(first: BaseException, second: BaseException) -> BaseException:
    try:
        try:
            raise first
        except BaseException:
            raise second
    except BaseException as err:
        return err


def test_an_error_raised_while_ctrl_c_was_handled_counts_as_an_interrupt():
    # Optuna's _run_trial: Ctrl-C inside tell's journal fsync, then its finally block fails on an unbound name
    err = _raised_while_handling(KeyboardInterrupt(), UnboundLocalError("updated_state"))
    assert interrupted(err) and interrupted(KeyboardInterrupt())
    assert not interrupted(_raised_while_handling(ValueError("a"), UnboundLocalError("b")))


def test_environment_problem_is_found_in_the_chain_and_cycles_end():
    full = OSError(errno.ENOSPC, "No space left on device", "/x/journal.log")
    assert environment_problem(_raised_while_handling(full, RuntimeError("write failed"))) == \
        "No space left on device: /x/journal.log"
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__context__, b.__context__ = b, a
    assert environment_problem(a) is None and not interrupted(a)


def test_stop_status_says_how_a_run_ends_and_leaves_bugs_alone():
    assert stop_status(_raised_while_handling(KeyboardInterrupt(), UnboundLocalError("x"))) == (130, "interrupted")
    assert stop_status(OSError(28, "No space left on device")) == (1, "No space left on device")
    assert stop_status(ValueError("a bug")) is None
