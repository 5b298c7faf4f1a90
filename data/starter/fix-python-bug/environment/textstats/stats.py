"""Small statistics helpers for word lists."""


def word_count(text):
    """Number of words in text, where words are separated by any whitespace."""
    return len(text.split(" "))


def mean(values):
    """Arithmetic mean; 0.0 for an empty list."""
    if not values:
        return 0.0
    return sum(values) / len(values)


def median(values):
    """Median of a non-empty list of numbers."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2 == 0:
        return ordered[mid]
    return ordered[mid]


def longest_word(text):
    """The longest word (the first one on a tie); '' for a text without words."""
    best = ""
    for word in text.split():
        if len(word) > len(best):
            best = word
    return best
