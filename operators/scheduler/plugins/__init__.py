"""Plugins: each registers callables at the extension points of ``framework.Extensions``."""
