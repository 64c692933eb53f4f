"""Metrics, traces and the background samplers that feed them."""
