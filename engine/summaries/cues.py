"""The cue words that put a statement under Goals, Decisions, Open loops or Next steps, in English,
French and Japanese (the languages the tokenizer handles). Each rule is written once here.

Why the needles: the four case-insensitive regexes were a third of the extractive summarizer's
time (each tries every alternative at every position of every sentence). On ASCII text a match
needs one of a few plain substrings of the lower-cased text (or, for imperatives, a verb at its
start), so a sentence with none skips the regex; other text always runs it.
tests/test_summary_cues.py checks the needles against the regexes.
"""

from __future__ import annotations

import re

__all__ = ["cue_section", "without_needles"]

_STRONG_OPEN = re.compile(
    r"\b(todo|to-do|not sure|unsure|tbd|open question|still open|to be decided|pas sûr|pas sure|à voir|a voir|"
    r"reste à|on verra|(?:not|haven't|hasn't|haven’t|hasn’t) (?:yet )?decided|undecided|yet to decide|pas d'accord|"
    r"pas encore décidé)\b|未定|検討中|まだ決", re.I)  # a decision not (yet) made is an open loop, never a decision
_DECISION = re.compile(
    r"\b(decided|decide to|decision made|the decision is|(?:we|i)(?:'re| are|'m| am|'ll| will)? go(?:ing)? with|let's (?:use|go with|"  # noqa: E501
    r"take|pick|do)|agreed|we agree|final answer|settled on|(?:we|i)(?:'ve| have)? (?:chose|chosen|picked|booked|"
    r"reserved|bought|signed|approved)|on part sur|on va partir sur|décidé|décision prise|decidé|on choisit|on prend|"
    r"c'est validé|on garde|d'accord pour)\b|^decision\b|^\S+(?: \S+)? it is[.!]?$|に決め|決定|予約しました|にします", re.I)
_NEXT = re.compile(
    r"\b(i'll|i will|we'll|we will|i'm going to|we're going to|i am going to|let me|next step|next,|then i|"
    r"tomorrow i|plan to|planning to|remind me to|je vais|on va|nous allons|demain|ensuite|prochaine étape)\b|"
    r"^(?:then |first |also |please |just |now )?(?:add|book|bring|call|check|confirm|create|document|email|fix|"
    r"install|move|note|order|pack|plan|prepare|remove|rename|review|run|schedule|send|switch|test|try|update|"
    r"upgrade|verify|write|ask|buy|cancel|tell|keep|start|ajoute|vérifie|envoie|prévois|pense à)\b|予定|つもり",
    re.I)
_GOAL = re.compile(
    r"\b(want to|wants to|need to|needs to|goal|goals|aim to|i'd like|i would like|trying to|have to|must|je veux|"
    r"je voudrais|j'aimerais|objectif|besoin de|il faut|je dois)\b|したい|たいです", re.I)

_IMPERATIVE_LEADS = ("then ", "first ", "also ", "please ", "just ", "now ")  # one word each
_IMPERATIVES = tuple(
    "add book bring call check confirm create document email fix install move note order pack plan prepare remove rename "
    "review run schedule send switch test try update upgrade verify write ask buy cancel tell keep start ajoute envoie"
    .split())  # the ASCII verbs of _NEXT's imperative alternative
# Each regex's ASCII alternatives, as substrings one of which a match on ASCII text contains (lower-cased).
_NEEDLES = {
    "Open loops": ("todo", "to-do", "not sure", "unsure", "tbd", "open question", "still open", "to be decided",
                   "pas sure", "a voir", "on verra", "decided", "yet to decide", "pas d'accord"),
    "Decisions": ("decide", "decision", "go with", "going with", "let's ", "agreed", "we agree", "final answer",
                  "settled on", "chose", "picked", "booked", "reserved", "bought", "signed", "approved", "on part sur",
                  "on va partir sur", "on choisit", "on prend", "on garde", "d'accord pour", " it is"),
    "Next steps": ("i'll", "i will", "we'll", "we will", "i'm going to", "we're going to", "i am going to", "let me",
                   "next step", "next,", "then i", "tomorrow i", "plan to", "planning to", "remind me to", "je vais",
                   "on va", "nous allons", "demain", "ensuite"),
    "Goals": ("want to", "wants to", "need to", "needs to", "goal", "aim to", "i'd like", "i would like", "trying to",
              "have to", "must", "je veux", "je voudrais", "j'aimerais", "objectif", "besoin de", "il faut", "je dois"),
}
_CUES = (("Open loops", _STRONG_OPEN), ("Decisions", _DECISION), ("Next steps", _NEXT), ("Goals", _GOAL))


_ANY_NEEDLE = {needle for needles in _NEEDLES.values() for needle in needles}
# less those that hold another ("to be decided" holds "decide"): a text holding one holds the other
_ALL_NEEDLES = tuple(sorted(n for n in _ANY_NEEDLE if not any(m != n and m in n for m in _ANY_NEEDLE)))


def _opens_with_imperative(low: str) -> bool:
    """Whether a lower-cased ASCII statement opens as _NEXT's imperative alternative may match: a
    verb's letters, after at most one lead word (a prefix test, as the regex's needle)."""
    return low.startswith(_IMPERATIVES) or (low.startswith(_IMPERATIVE_LEADS)
                                            and low.partition(" ")[2].startswith(_IMPERATIVES))


def without_needles(text: str) -> bool:
    """Whether an ASCII text holds none of the needles. Asked once of a message's sentences joined by
    newlines (no needle holds one): then only a sentence opening with an imperative can have a cue,
    and the others skip the needle scans (94 % of generated messages; 1.78 -> 1.05-1.15 s for the
    132k sentences of 20k messages)."""
    return text.isascii() and not any(map(text.lower().__contains__, _ALL_NEEDLES))


def cue_section(text: str, *, no_needles: bool = False) -> str | None:
    """The section a statement's cue names (the first of Open loops, Decisions, Next steps, Goals), or None.
    `no_needles`: `without_needles` held for a text that contains this one."""
    low = text.lower() if text.isascii() else None
    if no_needles and low is not None and not _opens_with_imperative(low):
        return None
    for name, cue in _CUES:
        if low is not None and not (any(map(low.__contains__, _NEEDLES[name]))
                                    or (name == "Next steps" and _opens_with_imperative(low))):
            continue  # ASCII text without any of the cue's words: the regex cannot match
        if cue.search(text):
            return name
    return None
