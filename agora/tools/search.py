"""BM25 search over a local corpus of short documents (``data/corpus/*.md`` by default).

A document is a Markdown file: ``# Title`` on its first line, then its text; its id is the
file name without ``.md``. The index (rank-bm25's ``BM25Okapi``) is built once per corpus
folder and cached for the process: a rollout worker searches many times per episode, and
re-reading ~50 files each time would cost more than the search.

Tokens are lower-case words with a plural ``s`` cut (``sensors`` finds ``Sensor``) and a few
stop words dropped; a stemmer library would do more, but the corpus is small and written for
agora, and this keeps the dependency to rank-bm25 alone.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from rank_bm25 import BM25Okapi

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus"
STOP_WORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how",
    "i", "in", "is", "it", "its", "my", "of", "on", "or", "the", "to", "what", "when", "which",
    "with", "you", "your"})
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Document:
    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class Hit:
    doc: Document
    score: float


def tokens(text: str) -> list[str]:
    out = []
    for word in _WORD.findall(text.lower()):
        if word in STOP_WORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.append(word)
    return out


def load_corpus(folder: Path) -> list[Document]:
    docs = []
    for path in sorted(folder.glob("*.md")):
        lines = path.read_text(encoding="utf-8").strip().splitlines()
        title = lines[0].lstrip("#").strip() if lines else path.stem
        text = " ".join(line.strip() for line in lines[1:] if line.strip())
        docs.append(Document(path.stem, title, text))
    if not docs:
        raise ValueError(f"no *.md documents in {folder}")
    return docs


class SearchIndex:
    """BM25 over one corpus; ``search`` returns the best hits with a positive score."""

    def __init__(self, docs: list[Document]) -> None:
        self.docs = docs
        self.bm25 = BM25Okapi([tokens(f"{d.title} {d.text}") for d in docs])

    def search(self, query: str, k: int = 2) -> list[Hit]:
        words = tokens(query)
        if not words:
            return []
        scores = self.bm25.get_scores(words)
        order = sorted(range(len(self.docs)), key=lambda i: (-scores[i], i))
        return [Hit(self.docs[i], float(scores[i])) for i in order[:k] if scores[i] > 0]

    def get(self, doc_id: str) -> Document:
        for doc in self.docs:
            if doc.doc_id == doc_id:
                return doc
        raise KeyError(doc_id)


@functools.lru_cache(maxsize=4)
def index_for(folder: str = str(DEFAULT_CORPUS)) -> SearchIndex:
    """The cached index of a corpus folder (built on first use)."""
    return SearchIndex(load_corpus(Path(folder)))
