"""``agora results``: run the learning experiments of a plan and write one table of their
before/after figures with intervals, the targets they meet, and their training curves.

``plan`` (what to run), ``commands`` (the CLI commands behind each experiment), ``figures``
(reading what the commands wrote), ``runner`` (running them, resumable) and ``report``
(results.md, results.json, curves.png).
"""
