"""Executor-side task functions: pure ``(descriptor, TaskContext) -> result`` callables that
read and write storage directly and return only small metadata. Testable without Spark."""
