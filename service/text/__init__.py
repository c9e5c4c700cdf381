"""Vocabulary, tokenisation and the concept inventory shared by service and export."""
