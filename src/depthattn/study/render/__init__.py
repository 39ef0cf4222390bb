"""Markdown and figures from the analyses' records: numbers (how every page writes a difference, a multiplier, a
band's zero), analyses (the depth axis, the orderings, a prediction's score, the tuned reading) and figures (a
study's plots)."""
