"""Regenerates the offline assets shipped in `hyperlaunch/data/assets/`: a synthetic corpus and a small
byte-level BPE tokenizer trained on it, so demos and tests run with no download.

    python -m hyperlaunch.data.offline_assets        # rewrites hyperlaunch/data/assets/{corpus.txt,tokenizer.json}

The corpus is generated from templates (no copyrighted text): simple sentences, arithmetic and
counting, structured enough that a tiny model's loss falls visibly within a few dozen steps.
"""

from __future__ import annotations

import random

from hyperlaunch.data.tokenizer import EOS_TOKEN, PAD_TOKEN
from hyperlaunch.data.tokenizer import OFFLINE_TOKENIZER_FILE as TOKENIZER_FILE

DATA_DIR = TOKENIZER_FILE.parent
CORPUS_FILE = DATA_DIR / "corpus.txt"
VOCAB_SIZE = 512  # keep equal to hyperlaunch.core.models.OFFLINE_TOKENIZER_VOCAB

_NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve".split()
_NAMES = "Ada Bo Cleo Dev Eli Fay Gus Hana Ivo Juno Kai Lena Milo Nia Oto Pia".split()
_ANIMALS = "cat dog fox owl bee yak crab frog hawk mole seal wolf".split()
_COLOURS = "red blue green amber grey white black silver golden violet".split()
_PLACES = "garden river valley harbour forest market tower library bridge meadow".split()
_VERBS = "sees follows paints finds carries visits greets watches".split()
_TIMES = "at dawn|in the morning|at noon|after lunch|in the evening|at night".split("|")


def _sentence(rng: random.Random) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        return (
            f"{rng.choice(_NAMES)} {rng.choice(_VERBS)} a {rng.choice(_COLOURS)} "
            f"{rng.choice(_ANIMALS)} near the {rng.choice(_PLACES)} {rng.choice(_TIMES)}."
        )
    if kind == 1:
        a, b = rng.randrange(7), rng.randrange(6)
        return f"{_NUMBERS[a].capitalize()} plus {_NUMBERS[b]} is {_NUMBERS[a + b]}."
    if kind == 2:
        start = rng.randrange(8)
        return "Counting: " + ", ".join(_NUMBERS[start : start + 5]) + "."
    if kind == 3:
        animal = rng.choice(_ANIMALS)
        return f"The {animal} lives by the {rng.choice(_PLACES)}, and the {animal} is {rng.choice(_COLOURS)}."
    name = rng.choice(_NAMES)
    return f"{name} walks to the {rng.choice(_PLACES)}; {name} comes home {rng.choice(_TIMES)}."


def generate_corpus(num_documents: int = 900, seed: int = 0) -> str:
    """Documents of 3-8 sentences, separated by blank lines."""
    rng = random.Random(seed)
    docs = [" ".join(_sentence(rng) for _ in range(rng.randint(3, 8))) for _ in range(num_documents)]
    return "\n\n".join(docs) + "\n"


def train_tokenizer(corpus: str) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus.split("\n\n"), trainer=trainer)
    return tokenizer


def main() -> None:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    corpus = generate_corpus()
    CORPUS_FILE.write_text(corpus)
    tokenizer = train_tokenizer(corpus)
    tokenizer.save(str(TOKENIZER_FILE))  # type: ignore[attr-defined]
    print(f"wrote {CORPUS_FILE} ({len(corpus)} chars) and {TOKENIZER_FILE}")


if __name__ == "__main__":
    main()
