import unittest

from stats import longest_word, mean, median, word_count


class WordCountTest(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(word_count("one two three"), 3)

    def test_extra_whitespace(self):
        self.assertEqual(word_count("  one   two\tthree\n"), 3)

    def test_empty(self):
        self.assertEqual(word_count(""), 0)


class MeanTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)

    def test_empty(self):
        self.assertEqual(mean([]), 0.0)


class MedianTest(unittest.TestCase):
    def test_odd(self):
        self.assertEqual(median([5, 1, 3]), 3)

    def test_even(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)


class LongestWordTest(unittest.TestCase):
    def test_tie_keeps_first(self):
        self.assertEqual(longest_word("cat dog emu"), "cat")


if __name__ == "__main__":
    unittest.main()
