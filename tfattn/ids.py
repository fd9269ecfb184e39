"""The four reserved tokens and their ids, the same in every vocabulary.

They live here, apart from the tokenizers (`tfattn.data.text`, tensorflow-text), so that what needs
only the ids (the decoding loop, its strategies, the fast tier, the alignments of a translation)
imports no TensorFlow at all for four integers.
"""

PAD, UNK, START, END = "", "[UNK]", "[START]", "[END]"
RESERVED = (PAD, UNK, START, END)
PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3
