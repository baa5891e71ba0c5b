"""Aligning and merging transformers trained from different seeds (issue 30; notes 005 §6).

* :mod:`~paramsym.experiments.merging.char_lm`: the trained pairs' models: character-level
  GPT-2- and Llama-style language models built from small Hugging Face configs, and their
  training on a :class:`~paramsym.data.text.CharCorpus` (the standard library's source text or a
  user's text file).

No experiment is registered here yet.
"""
