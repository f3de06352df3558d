"""Spec objects of the Lance table format (manifest, fragment, transaction, row ids,
feature flags). Pure data and protobuf conversion: nothing here does I/O."""
