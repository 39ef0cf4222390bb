"""Evaluation and analysis: loss curves, perplexity, costs, depth-weight maps."""
