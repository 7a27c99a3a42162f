# ruff: noqa: E501  (the declarations are data: one file a line)
"""The training corpora: one declaration per source (repository, commit, files with size and sha256).

Everything else derives from these records: ``samelang data import`` copies exactly these files from a
snapshot of the repository and checks each against its sha256, ``PROVENANCE.md`` is written from them
(``samelang data info --write``; a test keeps the two equal), and the readers know each
source by its name. The files themselves are not in the repository (see ``store.py`` for why and where
they live).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class SourceFile:
    path: str  # inside the repository, at the commit
    size: int
    sha256: str


@dataclass(frozen=True)
class Source:
    name: str
    kind: Literal["qa", "parallel"]
    repo: str  # owner/name on GitHub
    commit: str
    files: tuple[SourceFile, ...]
    licence: str  # SPDX identifier of the data's licence
    licence_file: str | None  # the repository's own statement of it, among ``files``
    langs: str
    about: str

    @property
    def data_files(self) -> tuple[SourceFile, ...]:
        return tuple(f for f in self.files if f.path != self.licence_file)


SOURCES: tuple[Source, ...] = (
    Source(
        "flores200",
        "parallel",
        "Helsinki-NLP/OPUS-MT-testsets",
        "ac0f19c0be3cb4e0d9450fcb2d7a9847c4bdd180",
        (
            SourceFile("datasets/facebook/flores/flores200_dataset/devtest/eng_Latn.devtest", 133108, "612e9fbe87997617c0fa8fa8929654a4f49b728d96738112c2b86ef6a1d78d88"),
            SourceFile("datasets/facebook/flores/flores200_dataset/devtest/arb_Arab.devtest", 212288, "ff09a52e63884e9b5bb1083780b58f37d3d14acb0c58c6b1f1f2544ecea12ff8"),
            SourceFile("datasets/facebook/flores/flores200_dataset/devtest/deu_Latn.devtest", 157370, "9a1bfa90d153fedb7ff80047f4a63d493998888eddb056e8a28e24592f26e5f2"),
            SourceFile("datasets/facebook/flores/flores200_dataset/devtest/ell_Grek.devtest", 288475, "6c36930cb4c2dff02ab1853852cd71e33e43beed8058e6f0c3395069b816be00"),
            SourceFile("datasets/facebook/flores/flores200_dataset/devtest/spa_Latn.devtest", 160955, "40fcb836b49b0a461a14c00b8bce1f03113f8d2668132af424e74b2421d18ce9"),
            SourceFile("datasets/facebook/flores/flores200_dataset/devtest/hin_Deva.devtest", 338106, "5f5fd39acadca29fb044a0398e81869e48f37de979df086f2fad4a7d1fd2d015"),
            SourceFile("datasets/facebook/flores/flores200_dataset/devtest/ron_Latn.devtest", 157973, "6f0b4240c136efdbb4543e09295e55c52e8ebc632b081ef9089ae2e3da2b89e6"),
            SourceFile("datasets/facebook/flores/flores200_dataset/devtest/rus_Cyrl.devtest", 261354, "cdc706ed862d1d35d8d67cfda0b396766646885434958b18291aa760ff1bb59e"),
            SourceFile("datasets/facebook/flores/flores200_dataset/devtest/tha_Thai.devtest", 366122, "d9bed1bf963821eab20051b18674950f345b67b0d0925290eaa6836eb06e76ca"),
            SourceFile("datasets/facebook/flores/flores200_dataset/devtest/tur_Latn.devtest", 148925, "c0fe28cee25f77fbe8471bcd3c87d26c7a284f4f0420f4293c9ce004b9bef8f2"),
            SourceFile("datasets/facebook/flores/flores200_dataset/devtest/vie_Latn.devtest", 184618, "86b70984f053cae5f5d554bc9e9d00397773b8325bed7e12e7695c2e61897cb0"),
            SourceFile("datasets/facebook/flores/flores200_dataset/devtest/zho_Hans.devtest", 121818, "b30158b1b76f7cee08530d8127a9769f4512597c7eefe97ae1ccf630d5b6e7fd"),
            SourceFile("datasets/facebook/flores/flores200_dataset/metadata_devtest.tsv", 105761, "8edac47f861fcf6b54dad2068c10ba8f741da8b8676861c6bc27fcd9f5483b36"),
            SourceFile("datasets/facebook/flores/flores200_dataset/README", 285, "a1b7eb3a097fd332fd541b563d9311c609f07f18b03ac7c0ca48e3cc9b6b937b"),
        ),
        "CC-BY-SA-4.0",
        None,
        "all 12",
        "FLORES-200 devtest (NLLB Team, Meta AI), as kept in the OPUS-MT test sets; 1,012 sentences per language, grouped into documents by the URL column of metadata_devtest.tsv",
    ),
    Source(
        "ntrex128",
        "parallel",
        "MicrosoftTranslator/NTREX",
        "8561f6a622db9edad1217683e5c83daefd8bb2bf",
        (
            SourceFile("NTREX-128/newstest2019-ref.eng-US.txt", 251710, "a163045804ddb5e9529c7cbdb751c6f6f7491a31f69dcc13129bfe1521595094"),
            SourceFile("NTREX-128/newstest2019-ref.arb.txt", 423901, "d271c8645933421f760eba8ed8cc1ceaaa052f917d9c2839b8abb27e0ded71e6"),
            SourceFile("NTREX-128/newstest2019-ref.deu.txt", 306436, "259d7406a07b63e6b5b9c4a22fb76b85e2578a3fa0a4e541a50f4f7348e5c1b2"),
            SourceFile("NTREX-128/newstest2019-ref.ell.txt", 544996, "cd9c8eda1b54f4b504b33769db7e56e26ba9ae768a64e13e0eef02a9ee9867fc"),
            SourceFile("NTREX-128/newstest2019-ref.spa.txt", 299333, "0ad8129e5ce0bea86ba7e0ea0db0504d6626b8a4d2a7cf4c44b7791c70e99b84"),
            SourceFile("NTREX-128/newstest2019-ref.hin.txt", 674699, "10d612b3960dc1f90d297aff7e3c6d39e6eb7221b912cef0c053d9f510e41bbc"),
            SourceFile("NTREX-128/newstest2019-ref.ron.txt", 314018, "ad8f396735ffe78f7cbfce1df7782fe587c395ed30b1eee92a16109d62d4648c"),
            SourceFile("NTREX-128/newstest2019-ref.rus.txt", 505414, "a7e3601298b0368659a5c006c52809cf6792e02eb94bde9b9693333278d85732"),
            SourceFile("NTREX-128/newstest2019-ref.tha.txt", 658582, "45a57c4f9fdbae282eb2c94821535ae3c88b09186a23c5506eb0907ba429d6a5"),
            SourceFile("NTREX-128/newstest2019-ref.tur.txt", 293653, "bd0c3978cb7d283ee5f8834d90a32fe2ffd0c71e4b133c677cff259d07a70ea9"),
            SourceFile("NTREX-128/newstest2019-ref.vie.txt", 359879, "dd5d16cf246da57f5ccb7490ae13b8df428e7cb53e17fa04552406d657abfe3c"),
            SourceFile("NTREX-128/newstest2019-ref.zho-CN.txt", 241603, "8bcd6f0868d33f26c8da12f55a82f66088a7b60a5f7b0b1a99dcec51daa8054a"),
            SourceFile("DOCUMENT_IDS.tsv", 30754, "88a8b0ff1eae47e83f60dcde01075b8c87d75ced59ca09e0af1eb539958e05d5"),
            SourceFile("LICENSE.md", 20137, "5e436ff8ffbb77d8607220e9bce20c8915d860010feeb6c1ebef5a85688e9b39"),
        ),
        "CC-BY-SA-4.0",
        "LICENSE.md",
        "all 12",
        "NTREX-128 (Microsoft): the WMT19 news test set translated by professionals; 1,997 sentences, documents by DOCUMENT_IDS.tsv",
    ),
    Source(
        "cmrc2018",
        "qa",
        "ymcui/cmrc2018",
        "c0eb1b6ba219847457e6af3180da722bbeb656af",
        (
            SourceFile("squad-style-data/cmrc2018_dev.json", 3299139, "e9ff74231f05c230c6fa88b84441ee334d97234cbb610991cd94b82db00c7f1f"),
            SourceFile("squad-style-data/cmrc2018_trial.json", 800221, "f3fae95b57da8e03afb2b57467dd221417060ef4d82db13bf22fc88589f3a6f3"),
            SourceFile("LICENCE", 20131, "7abe19ec9bb73b36141b999b861d24ad855e808bafe0f81e84cce28556f6c297"),
        ),
        "CC-BY-SA-4.0",
        "LICENCE",
        "zh",
        "CMRC 2018 dev and trial sets (SQuAD format, Simplified Chinese Wikipedia)",
    ),
    Source(
        "drcd",
        "qa",
        "DRCKnowledgeTeam/DRCD",
        "b944790de5af02c5fbb7cd9cb1473d27d169eebf",
        (
            SourceFile("DRCD_dev.json", 2184379, "e236df03861ba241bd7b29628cd48b3b8e339c60137e041a4358b5320ed61928"),
            SourceFile("DRCD_test.json", 2125600, "d9de0b4d247a8391ac8daee6c02c2c8272b75562a1e2377b50ae04ecc09a7438"),
            SourceFile("README.md", 6956, "df7c740cbe95a8bc7affc8aa0dd01736fc3becf5fe18fb82a7eefe451f3c3520"),
        ),
        "CC-BY-SA-3.0",
        "README.md",
        "zh",
        "DRCD dev and test sets (Delta Electronics; Traditional Chinese Wikipedia, converted to Simplified with OpenCC t2s at load; the original kept)",
    ),
    Source(
        "arcd",
        "qa",
        "husseinmozannar/SOQAL",
        "1229d34aa2b7a0b9a2e4858c9268e68f45d7e3c4",
        (
            SourceFile("data/arcd.json", 1942371, "9d17bd7a4830dbcc12d4b042974138650cc69ee576c6e991050120448cd07633"),
            SourceFile("LICENSE", 1073, "be4d6b90fd5ae3a7044ab3f1a462887c422882e8befdd58f1c8faaa3b43b500a"),
        ),
        "MIT",
        "LICENSE",
        "ar",
        "ARCD, the Arabic Reading Comprehension Dataset (Mozannar et al. 2019), all 1,395 questions",
    ),
    Source(
        "iapp_wiki_qa",
        "qa",
        "iapp-technology/iapp-wiki-qa-dataset",
        "644a29c59bac62d5b15b9e9b06c55bba00708eca",
        (
            SourceFile("squad_format/data.zip", 2876630, "a3530ceafd3b39757fc9720ee0e04f1454e6775bec0c8641964427567fafb214"),
            SourceFile("LICENSE", 1082, "891bafab10b4ad63ece5c324b93712dac6f8678f1ff71e34bdc8c609afb144b0"),
        ),
        "MIT",
        "LICENSE",
        "th",
        "iApp Wiki QA (Thai Wikipedia), SQuAD-format train/valid/test inside data.zip",
    ),
    Source(
        "tydiqa_goldp",
        "qa",
        "wuhjie/few_shots_that_matters_wu",
        "6bfe6324e428ec21a777b5543cd8e50ec82dcb3c",
        (
            SourceFile("data/tydiqa/tydiqa-goldp-v1.1-train/tydiqa.goldp.en.train.json", 2982895, "08efa799dcb11646007886fe695ce3d8695c558cbe9708673e839ec41842be68"),
            SourceFile("data/tydiqa/tydiqa-goldp-v1.1-dev/tydiqa.goldp.en.dev.json", 363264, "48c61c94db82b5764ae23227230e6a2edd4abfb21f0b69311cc1ccec53c49395"),
            SourceFile("data/tydiqa/tydiqa-goldp-v1.1-dev/tydiqa.goldp.ar.dev.json", 2327764, "77ee56d46345f5480e94a6c09c10ae4b8a56535ab4b82dc182ded9fe2d77a89f"),
            SourceFile("data/tydiqa/tydiqa-goldp-v1.1-dev/tydiqa.goldp.ru.dev.json", 2466025, "c78f9d70486fd31036b9563dc9bf8db95da18504e965837f985dd94544033064"),
        ),
        "Apache-2.0",
        None,
        "en, ar, ru",
        "TyDi QA GoldP v1.1 (Google): en train (with answer spans); en, ar, ru dev (this copy has the answer texts blanked: passage labels only). Taken from this repository at this commit only; its MLQA and XQuAD copies are not taken",
    ),
)  # fmt: skip

BY_NAME: dict[str, Source] = {s.name: s for s in SOURCES}

# Looked at and not taken, with the reason (PROVENANCE.md lists them; the test sets are here too so
# that nothing can add them back without deleting a line that says why not).
NOT_TAKEN: tuple[tuple[str, str], ...] = (
    ("MLQA (any copy, including the one in wuhjie/few_shots_that_matters_wu)", "an evaluation set of ours: never trained on"),
    ("XQuAD copies in other repositories", "our own test articles come from it; XQuAD is read only from samelang/corpora/data/xquad"),
    ("SQuAD v1.1 / v2.0 dev, and anything derived from it", "XQuAD's 48 articles are drawn from SQuAD v1.1 dev"),
    ("XNLI", "CC BY-NC 4.0: NonCommercial, and the shipped models are Apache-2.0 products"),
    ("TQuAD (TQuad/turkish-nlp-qa-dataset)", "no licence is stated in the repository: not redistributable"),
    ("CMRC 2018 train (squad-style-data/cmrc2018_train.json)", "over 4 MiB: not in the repository snapshot"),
    ("DRCD training set (DRCD_training.json)", "over 4 MiB: not in the repository snapshot"),
    ("iApp Wiki QA, the single-file release (iapp-thai-wikipedia-qa-1961-docs-9170-questions.json)", "over 4 MiB: not in the snapshot; squad_format/data.zip holds the same questions"),
    ("TyDi QA GoldP ar and ru train", "over 4 MiB: not in the snapshot at that commit"),
    ("FLORES-200 dev split", "not in the OPUS-MT-testsets snapshot (devtest only)"),
)  # fmt: skip
