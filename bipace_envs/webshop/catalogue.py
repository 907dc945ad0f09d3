"""WebShop catalogue: read the reference's raw JSON files (or our generated ones) and clean them
exactly as the reference's ``engine.load_products`` does.

    from bipace_envs.webshop.catalogue import load_catalogue
    cat = load_catalogue("/path/to/webshop/data")            # real data, sha256-checked
    cat = load_catalogue(fixture_dir, verify_hashes=False)    # any files in the raw schema

The reference draws each product's price with the unseeded global ``random``; ours uses a seeded
``random.Random(price_seed)`` so episodes are reproducible.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

# name -> (bytes, sha256) of the reference files (../shared/specs/envs.md)
REFERENCE_FILES = {
    "items_shuffle_1000.json": (4_467_013,
                                "30a4765c3a327af72d9a9a95a6b2486d516f0fa1d3ecd83681901ce82a21b269"),
    "items_ins_v2_1000.json": (147_099, "f88a36314a397b53b3d9c3fa5878e5f7b26d35019a51ec83fbedeca61a948f6f"),
    "items_human_ins.json": (5_137_548, "cf78667548a71786e1d9049c24b802e48e1084ad4bb021cae56ce1f6d96954a3"),
    "items_shuffle.json": (5_479_720_229, "2ef591d65df3af89e972ab72468eb82cbf124d876552d9f3678667edd620a6c8"),
    "items_ins_v2.json": (186_295_270, "1d36af476bdb8f82a5da62bd8acdabe54cd8de2fa84010d37da5c4890feb447e"),
}
# data_files preset -> (products, synthetic instructions/attributes, human instructions)
DATA_FILES = {
    "small": ("items_shuffle_1000.json", "items_ins_v2_1000.json", "items_human_ins.json"),
    "full": ("items_shuffle.json", "items_ins_v2.json", "items_human_ins.json"),
}


class DataFilesError(FileNotFoundError):
    """Raised when reference data files are missing or do not match their known sha256."""


@dataclass
class Product:
    """One cleaned product (the reference's dict keys in brackets)."""
    asin: str
    name: str                      # raw name (used by the type reward)
    title: str                     # [Title]
    description: str               # [Description]
    bullet_points: list            # [BulletPoints]
    pricing: list                  # [pricing]: [] never; [p] or [lo, hi]
    price_tag: str                 # [Price]: "$25.99 to $39.99", "$120.0", "$100.0"
    options: dict                  # lower-cased option name -> lower-cased values ('/' -> ' | ')
    category: str
    query: str                     # lower-cased, stripped
    product_category: str          # "A › B › C"
    attributes: list               # [Attributes] from items_ins_v2, else ['DUMMY_ATTR']
    instruction_text: str | None = None          # synthetic instruction (items_ins_v2)
    instruction_attributes: list | None = None
    human_instructions: list = field(default_factory=list)   # items_human_ins entries
    main_image: str = ""


@dataclass
class Catalogue:
    """Cleaned products in file order, their drawn prices, and where they came from."""
    products: list
    prices: dict                   # asin -> price drawn once at load
    source: str                    # "generated(...)" or the data directory

    def __post_init__(self):
        self.by_asin = {p.asin: p for p in self.products}


def _parse_pricing(pricing, asin: str):
    if not pricing:
        return [100.0], "$100.0"
    try:
        values = [float(Decimal(re.sub(r"[^\d.]", "", piece))) for piece in pricing.split("$")[1:]]
    except (InvalidOperation, AttributeError) as exc:
        raise ValueError(f"product {asin}: cannot parse pricing {pricing!r} "
                         "(expected '$x' or '$x - $y')") from exc
    if not values:
        raise ValueError(f"product {asin}: pricing {pricing!r} has no '$' amount "
                         "(expected '$x' or '$x - $y')")
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def clean_products(raw_products: list, ins_v2: dict, human_ins: dict) -> list:
    """The reference's cleaning: skip bad/duplicate asins, parse prices and options, attach the
    attributes and instructions. Returns Products in file order."""
    products, seen = [], set()
    for i, p in enumerate(raw_products):
        if not isinstance(p, dict) or "asin" not in p:
            raise ValueError(f"product #{i} is not an object with an 'asin' field")
        asin = p["asin"]
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue            # the reference drops these silently; so do we (same catalogue)
        seen.add(asin)
        pricing, price_tag = _parse_pricing(p.get("pricing"), asin)
        options = {}
        for opt_name, contents in (p.get("customization_options") or {}).items():
            if contents is None:
                continue
            options[opt_name.lower()] = [c["value"].strip().replace("/", " | ").lower() for c in contents]
        small = p.get("small_description", "")
        bullets = small if isinstance(small, list) else [small]
        attrs = ins_v2.get(asin, {})
        images = p.get("images") or [""]
        products.append(Product(
            asin=asin, name=p["name"], title=p["name"], description=p.get("full_description") or "",
            bullet_points=bullets, pricing=pricing, price_tag=price_tag, options=options,
            category=p.get("category", ""), query=str(p.get("query", "")).lower().strip(),
            product_category=p.get("product_category", ""),
            attributes=attrs["attributes"] if "attributes" in attrs else ["DUMMY_ATTR"],
            instruction_text=attrs.get("instruction"),
            instruction_attributes=attrs.get("instruction_attributes"),
            human_instructions=list(human_ins.get(asin, [])), main_image=images[0]))
    return products


def draw_prices(products: list, seed: int) -> dict:
    """One price per product: uniform in its range, its single price, or 100 (reference rule)."""
    rng = random.Random(seed)
    prices = {}
    for p in products:
        prices[p.asin] = p.pricing[0] if len(p.pricing) == 1 else rng.uniform(*p.pricing[:2])
    return prices


def _cache_dir() -> Path:
    return Path(os.environ.get("BIPACE_WEBSHOP_CACHE", Path.home() / ".cache" / "bipace" / "webshop"))


def sha256_file(path: Path) -> str:
    """sha256 of a file, remembered under the cache dir by (path, size, mtime): the full
    catalogue is 5.5 GB and should be hashed once."""
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    memo_path = _cache_dir() / "sha256.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if key in memo:
        return memo[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    memo[key] = h.hexdigest()
    try:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        memo_path.write_text(json.dumps(memo))
    except OSError:
        pass                    # a read-only home only costs re-hashing
    return memo[key]


def check_data_files(data_dir, names, verify_hashes: bool = True) -> None:
    """Raise DataFilesError naming every missing file and (with verify_hashes) every file whose
    size or sha256 differs from the reference's."""
    data_dir = Path(data_dir)
    problems = []
    for name in names:
        path = data_dir / name
        if not path.is_file():
            problems.append(f"missing: {path}")
            continue
        if verify_hashes and name in REFERENCE_FILES:
            size, sha = REFERENCE_FILES[name]
            actual_size = path.stat().st_size
            if actual_size != size:
                problems.append(f"size mismatch: {path} has {actual_size:,} bytes, "
                                f"the reference file has {size:,}")
            elif (actual := sha256_file(path)) != sha:
                problems.append(f"sha256 mismatch: {path} is {actual}, the reference file is {sha}")
    if problems:
        raise DataFilesError(
            "WebShop data check failed:\n  " + "\n  ".join(problems) + "\nPut the reference files "
            f"({', '.join(names)}) in data_dir, pass data_dir=None for the generated catalogue, or "
            "verify_hashes=False for other files in the same raw schema.")


def load_catalogue(data_dir, data_files: str = "small", verify_hashes: bool = True,
                   price_seed: int = 0, num_products: int | None = None) -> Catalogue:
    """Load raw files from data_dir (names from DATA_FILES[data_files])."""
    if data_files not in DATA_FILES:
        raise ValueError(f"data_files={data_files!r}; choose one of {sorted(DATA_FILES)}")
    names = DATA_FILES[data_files]
    data_dir = Path(data_dir).expanduser()
    check_data_files(data_dir, names, verify_hashes)
    loaded = []
    for name in names:
        with open(Path(data_dir) / name, encoding="utf-8") as f:
            loaded.append(json.load(f))
    raw, ins_v2, human = loaded
    if num_products is not None:
        raw = raw[:num_products]            # the reference assumes items_shuffle is pre-shuffled
    products = clean_products(raw, ins_v2, human)
    return Catalogue(products, draw_prices(products, price_seed), source=str(data_dir))


def catalogue_from_raw(raw, ins_v2, human, price_seed: int = 0, source: str = "memory") -> Catalogue:
    products = clean_products(raw, ins_v2, human)
    return Catalogue(products, draw_prices(products, price_seed), source=source)
