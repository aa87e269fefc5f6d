"""The reference executor: the specification every adapter is graded against."""

from polyhal.reference.executor import ReferenceExecutor, bind_inputs, check_shape, run, run_node

__all__ = ["ReferenceExecutor", "bind_inputs", "check_shape", "run", "run_node"]
