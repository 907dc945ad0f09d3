"""Deterministic generator of a WebShop-style product catalogue in the reference's raw schema.

    raw, ins_v2, human = generate_raw(n_products=2000, seed=0)
    write_raw("/tmp/ws", raw, ins_v2, human)     # items_shuffle_1000.json, items_ins_v2_1000.json, ...

Products span five categories (fashion, beauty, grocery, garden/home, electronics) and ~35 product
types, each with its own category path, search query, attribute phrases, customization options
(colour, size, flavour, pack size, ...) and price band; titles, descriptions and bullet points are
composed from the attributes so that attributes are findable the way the reference's reward looks
for them. Only ``random.Random(seed)`` and list order are used, so output never depends on the hash
seed. Option values are unique within a product and never collide with page buttons.
"""
from __future__ import annotations

import json
import random
import string
from pathlib import Path

BRANDS = ("Acme Aldervale Brightpeak Cobaltline Corvina Dunmore Elmstead Fernhollow Glenbrook Halcyon "
          "Ironwood Juniper Kestrel Lumina Marlow Northway Oakhaven Pinecrest Quillon Redfield Sablewood "
          "Tidewater Umberly Verdant Westmere Yarrow Zephyra Arbor Bexley Calloway").split()
COLORS = ("Black", "White", "Navy Blue", "Heather Grey", "Burgundy", "Olive Green", "Black/White",
          "Light Pink", "Royal Blue", "Charcoal", "Khaki", "Red", "Beige", "Teal", "Lavender")
HOME_COLORS = ("Walnut", "Espresso", "Natural Oak", "White", "Black", "Grey Wash", "Rustic Brown")
SIZES_SHOE = ("6", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10 Wide", "11", "12", "13")
SIZES_APPAREL = ("X-Small", "Small", "Medium", "Large", "X-Large", "XX-Large")
PACKS = ("Pack of 1", "Pack of 2", "Pack of 3", "Pack of 6", "Pack of 12")

# option kind -> (raw option name, value pool)
OPTION_KINDS = {
    "color": ("Color", COLORS), "home_color": ("Color", HOME_COLORS),
    "shoe_size": ("Size", SIZES_SHOE), "apparel_size": ("Size", SIZES_APPAREL),
    "pack": ("Item Package Quantity", PACKS),
    "count": ("Size", ("20 Count", "50 Count", "100 Count", "200 Count")),
    "ounce": ("Size", ("8 Ounce", "12 Ounce", "16 Ounce", "32 Ounce", "1.5 Pound")),
    "ml": ("Size", ("50 ml", "100 ml", "250 ml", "500 ml")),
    "flavor": ("Flavor Name", ("Original", "Vanilla", "Peppermint", "Mango Chili", "Sea Salt", "Honey Lemon",
                               "Dark Roast", "Jasmine")),
    "scent": ("Scent", ("Lavender Vanilla", "Coconut", "Unscented", "Eucalyptus Mint", "Citrus")),
    "shade": ("Color", ("Nude Beige", "Ruby Red", "Coral", "Plum", "Mauve", "Rose Gold", "Mocha")),
    "pillow_size": ("Size", ("16x16 inch", "18x18 inch", "20x20 inch", "24x24 inch")),
    "rug_size": ("Size", ("2x3 ft", "3x5 ft", "5x7 ft", "8x10 ft")),
    "length": ("Size", ("3 ft", "6 ft", "10 ft", "15 ft")),
    "capacity": ("Capacity", ("5000mAh", "10000mAh", "20000mAh", "26800mAh")),
    "model": ("Style", ("iPhone 14", "iPhone 15", "Galaxy S23", "Galaxy S24", "Pixel 8")),
    "style": ("Style", ("Modern", "Farmhouse", "Industrial", "Mid Century")),
}

# category -> (root path, [(noun, path tail, query, attributes, option kinds, (min, max) price)])
CATEGORIES = {
    "fashion": ("Clothing, Shoes & Jewelry", [
        ("running shoes", "Men › Shoes › Athletic › Running",
         "men's running shoes",
         ["rubber sole", "lightweight", "breathable", "slip resistant", "memory foam", "lace up"],
         ["color", "shoe_size"], (25, 130)),
        ("sandals", "Women › Shoes › Sandals",
         "women's sandals",
         ["open toe", "ankle strap", "arch support", "non slip", "rubber sole"],
         ["color", "shoe_size"], (15, 70)),
        ("hoodie", "Women › Clothing › Fashion Hoodies & Sweatshirts",
         "women's hoodies",
         ["machine wash", "long sleeve", "drawstring closure", "cotton blend", "relaxed fit"],
         ["color", "apparel_size"], (18, 65)),
        ("t-shirt", "Men › Clothing › Shirts › T-Shirts",
         "men's t-shirts",
         ["short sleeve", "cotton", "crew neck", "moisture wicking", "machine wash"],
         ["color", "apparel_size"], (9, 35)),
        ("jeans", "Men › Clothing › Jeans",
         "men's jeans",
         ["slim fit", "stretch denim", "button closure", "machine wash"],
         ["color", "apparel_size"], (25, 80)),
        ("yoga pants", "Women › Clothing › Active › Leggings",
         "women's yoga pants",
         ["high waist", "tummy control", "four way stretch", "pocket", "squat proof"],
         ["color", "apparel_size"], (15, 55)),
        ("ankle socks", "Men › Clothing › Socks",
         "athletic socks",
         ["cushioned", "moisture wicking", "arch support", "breathable"],
         ["pack", "apparel_size"], (8, 30)),
        ("rain jacket", "Women › Clothing › Coats, Jackets & Vests",
         "women's rain jacket",
         ["waterproof", "hooded", "packable", "zip closure", "windproof"],
         ["color", "apparel_size"], (30, 120)),
    ]),
    "beauty": ("Beauty & Personal Care", [
        ("shampoo", "Hair Care › Shampoo & Conditioner › Shampoos",
         "sulfate free shampoo",
         ["sulfate free", "paraben free", "dry hair", "argan oil", "color safe"],
         ["ml", "scent"], (8, 40)),
        ("face serum", "Skin Care › Face › Serums",
         "vitamin c serum",
         ["vitamin c", "hyaluronic acid", "anti aging", "dark spots", "fine lines"],
         ["ml"], (12, 60)),
        ("lipstick", "Makeup › Lips › Lipstick",
         "matte lipstick",
         ["long lasting", "matte finish", "cruelty free", "highly pigmented"],
         ["shade", "pack"], (6, 28)),
        ("body lotion", "Skin Care › Body › Moisturizers › Lotions",
         "body lotion",
         ["dry skin", "shea butter", "fragrance free", "non greasy", "sensitive skin"],
         ["ounce", "scent"], (6, 30)),
        ("nail polish", "Foot, Hand & Nail Care › Nail Polish",
         "nail polish set",
         ["quick dry", "long lasting", "non toxic", "high gloss"],
         ["shade"], (5, 25)),
        ("hair dryer", "Hair Care › Styling Tools › Hair Dryers",
         "ionic hair dryer",
         ["ionic", "fast drying", "diffuser", "low noise", "travel size"],
         ["color"], (20, 140)),
        ("makeup brush set", "Tools & Accessories › Makeup Brushes & Tools › Brush Sets",
         "makeup brushes",
         ["synthetic bristles", "cruelty free", "travel case", "easy clean"],
         ["color", "pack"], (8, 45)),
    ]),
    "grocery": ("Grocery & Gourmet Food", [
        ("green tea", "Beverages › Tea › Green",
         "green tea bags",
         ["organic", "caffeine free", "non gmo", "individually wrapped", "gluten free"],
         ["count", "flavor"], (4, 25)),
        ("coffee beans", "Beverages › Coffee › Whole Coffee Beans",
         "whole bean coffee",
         ["medium roast", "single origin", "fair trade", "low acid", "organic"],
         ["ounce", "flavor"], (8, 35)),
        ("protein bars", "Snack Foods › Bars › Protein",
         "protein bars",
         ["high protein", "low sugar", "gluten free", "keto friendly", "plant based"],
         ["flavor", "pack"], (10, 40)),
        ("olive oil", "Pantry Staples › Cooking Oils › Olive",
         "extra virgin olive oil",
         ["extra virgin", "cold pressed", "non gmo", "glass bottle"],
         ["ounce", "pack"], (8, 45)),
        ("dark chocolate", "Snack Foods › Candy & Chocolate › Chocolate Bars",
         "dark chocolate bar",
         ["dairy free", "fair trade", "low sugar", "vegan", "individually wrapped"],
         ["flavor", "pack"], (5, 30)),
        ("trail mix", "Snack Foods › Trail Mix",
         "trail mix snack packs",
         ["high protein", "no artificial flavors", "resealable bag", "gluten free"],
         ["ounce", "pack"], (6, 28)),
        ("hot sauce", "Pantry Staples › Condiments › Hot Sauce",
         "hot sauce",
         ["gluten free", "no preservatives", "small batch", "extra hot"],
         ["flavor", "pack"], (5, 25)),
    ]),
    "garden": ("Home & Kitchen", [
        ("console table", "Furniture › Living Room Furniture › Tables › Sofa Tables",
         "console tables",
         ["solid wood", "living room", "easy assembly", "storage shelf", "space saving"],
         ["home_color", "style"], (60, 320)),
        ("throw pillow covers", "Home Décor › Decorative Pillows & Covers › Throw Pillow Covers",
         "throw pillow covers",
         ["living room", "hidden zipper", "machine washable", "soft velvet", "farmhouse"],
         ["color", "pillow_size"], (9, 35)),
        ("bath towels", "Bath › Towels › Bath Towels",
         "bath towels set",
         ["cotton", "quick dry", "highly absorbent", "machine washable", "hotel quality"],
         ["color", "pack"], (15, 60)),
        ("area rug", "Home Décor › Rugs, Pads & Protectors › Area Rugs",
         "area rugs",
         ["non slip", "living room", "low pile", "machine washable", "stain resistant"],
         ["color", "rug_size"], (30, 260)),
        ("desk lamp", "Lighting & Ceiling Fans › Lamps & Shades › Desk Lamps",
         "led desk lamp",
         ["dimmable", "usb charging port", "eye caring", "touch control", "energy efficient"],
         ["color"], (18, 70)),
        ("bookshelf", "Furniture › Home Office Furniture › Bookcases",
         "bookshelf",
         ["easy assembly", "metal frame", "space saving", "living room", "engineered wood"],
         ["home_color", "style"], (45, 240)),
        ("shower curtain", "Bath › Bathroom Accessories › Shower Curtains",
         "shower curtain",
         ["waterproof", "machine washable", "rust proof", "weighted hem"],
         ["color"], (10, 40)),
    ]),
    "electronics": ("Electronics", [
        ("wireless earbuds", "Headphones, Earbuds & Accessories › Earbuds",
         "wireless earbuds",
         ["noise cancelling", "bluetooth", "long battery life", "water resistant", "charging case"],
         ["color"], (20, 150)),
        ("phone case", "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
         "phone case",
         ["shockproof", "slim fit", "wireless charging", "screen protector", "raised edges"],
         ["color", "model"], (8, 35)),
        ("usb c cable", "Computers & Accessories › Cables › USB Cables",
         "usb c cable",
         ["fast charging", "braided nylon", "data transfer", "durable"],
         ["length", "pack"], (6, 25)),
        ("bluetooth speaker",
         "Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers",
         "portable bluetooth speaker",
         ["waterproof", "bluetooth", "long battery life", "deep bass", "portable"],
         ["color"], (20, 130)),
        ("power bank", "Cell Phones & Accessories › Chargers & Power Adapters › Portable Power Banks",
         "power bank",
         ["fast charging", "usb c", "portable", "led display", "high capacity"],
         ["capacity", "color"], (15, 70)),
        ("hdmi cable", "Television & Video › Accessories › Cables › HDMI Cables",
         "hdmi cable",
         ["high speed", "4k", "gold plated", "braided nylon"],
         ["length", "pack"], (6, 30)),
        ("wireless mouse", "Computers & Accessories › Computer Accessories › Mice",
         "wireless mouse",
         ["ergonomic", "silent click", "usb receiver", "long battery life", "rechargeable"],
         ["color"], (9, 60)),
    ]),
}
# lower-cased option values that would shadow page buttons
_RESERVED = {"back to search", "< prev", "next >", "description", "features", "reviews", "buy now", "search"}

SYNTH_TEMPLATES = ("i need {a1} {noun}", "i need {a1} {noun} with {a2}", "i want to buy {noun} with {a1}",
                   "i am looking for {a1} {noun}", "i'm looking for {noun} with {a1} and {a2}",
                   "find me some {a1} {noun}", "i would like {noun} with {a1}", "i want {a1} and {a2} {noun}")
HUMAN_TEMPLATES = ("i'm looking for {a1} {noun} in {opts}.", "i need a {noun} that is {a1}, {opts}.",
                   "looking for {a1} {noun}, {opts}", "can you find me {noun} with {a1}? {opts}.")
DESC_TEMPLATES = ("{brand} {noun} designed for everyday use. {A1} and {a2} for lasting comfort and value.",
                  "Our {noun} is {a1} and {a2}. A reliable pick from {brand}.",
                  "Meet the {brand} {noun}: {a1}, {a2}, and built to last.")
TITLE_TEMPLATES = ("{Brand} {A1} {Noun} {Extra}", "{Brand} {Noun} {A1} {A2}",
                   "{A1} {Noun} by {Brand} - {Extra}", "{Brand} {Noun}, {A1}, {Extra}")
EXTRAS = ("for Everyday Use", "Classic Edition", "2024 Model", "Value Pack", "Premium Quality", "New Version")
LAST_BULLETS = ("Easy to clean ", "Satisfaction guaranteed ", "Great gift idea ", "Ships in a gift box ")
# Share of sized products whose description lists the sizes (as real size charts do). With the
# reference's options quirk a size only scores when its value appears in the text, so this sets how
# many generated goals the quirk makes unreachable (the reference's small set: 458 of 6,910).
SIZE_CHART_SHARE = 0.885


def _title(s: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in s.split(" "))


def _options(kinds, rng) -> dict:
    if rng.random() < 0.2:
        return {}
    chosen = kinds[: 1 + (rng.random() < 0.5)] if len(kinds) > 1 else kinds
    opts, used = {}, set()
    for kind in chosen:
        name, pool = OPTION_KINDS[kind]
        if name in opts:
            continue
        k = rng.randint(2, 3) if len(chosen) > 1 else rng.randint(2, 4)
        values = [v for v in rng.sample(pool, min(k, len(pool)))
                  if v.replace("/", " | ").lower() not in used | _RESERVED]
        used.update(v.replace("/", " | ").lower() for v in values)
        opts[name] = values
    return opts


def _pricing(lo: float, hi: float, rng) -> str:
    r, p1 = rng.random(), round(rng.uniform(lo, hi), 2)
    if r < 0.6:
        return f"${p1:.2f}"
    if r < 0.92:
        return f"${p1:.2f} - ${round(p1 * rng.uniform(1.1, 1.6), 2):.2f}"
    return ""                                    # no price: the reference shows $100.0


def _human(i: int, asin: str, noun: str, attrs: list, opts: dict, rng) -> list:
    out = []
    for _ in range(1 + (rng.random() < 0.4) if rng.random() < 0.9 else 0):
        picks = [(n.lower(), rng.choice(v).replace("/", " | ").lower()) for n, v in opts.items()]
        wanted = ", ".join(v if n == "color" else f"{v} {n}" for n, v in picks) or "please"
        text = rng.choice(HUMAN_TEMPLATES).format(a1=attrs[0], noun=noun, opts=wanted)
        out.append({"asin": asin, "instruction": text,
                    "attributes": attrs[1:], "options": [f"{n}: {v}" for n, v in picks],
                    "instruction_attributes": [] if rng.random() < 0.02 else [attrs[0]],
                    "instruction_options": [v for _, v in picks], "assignment_id": f"A{i}",
                    "worker_id": f"W{i % 97}"})
    return out


def _product(i: int, asin: str, category: str, root: str, ptype, rng) -> tuple:
    noun, path, query, attr_pool, kinds, (lo, hi) = ptype
    brand = rng.choice(BRANDS)
    attrs = rng.sample(attr_pool, min(len(attr_pool), rng.randint(2, 4)))
    a1, a2 = attrs[0], attrs[1]
    title = rng.choice(TITLE_TEMPLATES).format(Brand=brand, A1=_title(a1), A2=_title(a2), Noun=_title(noun),
                                               Extra=rng.choice(EXTRAS))
    bullets = [f"{_title(a)} " for a in attrs[1:]] + [rng.choice(LAST_BULLETS)]
    pricing = _pricing(lo, hi, rng)
    opts = _options(kinds, rng)
    custom = {}
    for name, vals in opts.items():
        images = [f"https://example.invalid/{asin}/{j}.jpg" if rng.random() < 0.5 else None
                  for j in range(len(vals))]
        custom[name] = [{"value": v, "image": img} for v, img in zip(vals, images)]
    if custom and rng.random() < 0.1:
        custom["Pattern Name"] = None            # the raw data has empty option groups too
    description = rng.choice(DESC_TEMPLATES).format(brand=brand, noun=noun, a1=a1, a2=a2, A1=a1.capitalize())
    if "Size" in opts and rng.random() < SIZE_CHART_SHARE:
        description += f" Available sizes: {', '.join(opts['Size'])}."
    raw = {
        "name": title, "product_information": {}, "brand": f"Brand: {brand}", "brand_url": "",
        "full_description": description, "pricing": pricing, "list_price": "",
        "images": [f"https://example.invalid/{asin}.jpg"], "product_category": f"{root} › {path}",
        "average_rating": round(rng.uniform(3, 5), 1),
        "small_description": bullets if rng.random() < 0.9 else " ".join(bullets),
        "customization_options": custom or "", "asin": asin, "category": category, "query": query,
        "page": rng.randint(1, 5), "small_description_old": "",
    }
    ins_v2 = {"attributes": attrs, "instruction": rng.choice(SYNTH_TEMPLATES).format(a1=a1, a2=a2, noun=noun),
              "instruction_attributes": attrs[:2] if rng.random() < 0.5 else attrs[:1]}
    return raw, ins_v2, _human(i, asin, noun, attrs, opts, rng)


def generate_raw(n_products: int = 2000, seed: int = 0) -> tuple:
    """(items_shuffle list, items_ins_v2 dict, items_human_ins dict) for n_products products."""
    if n_products < 1:
        raise ValueError(f"n_products must be >= 1, got {n_products}")
    rng = random.Random(seed)
    types = [(cat, root, t) for cat, (root, ts) in CATEGORIES.items() for t in ts]
    raw, ins_v2, human, asins = [], {}, {}, set()
    for i in range(n_products):
        while (asin := "B0" + "".join(rng.choices(string.ascii_uppercase + string.digits, k=8))) in asins:
            pass
        asins.add(asin)
        cat, root, ptype = types[rng.randrange(len(types))]
        r, ins, hum = _product(i, asin, cat, root, ptype, rng)
        raw.append(r)
        ins_v2[asin] = ins
        if hum:
            human[asin] = hum
    return raw, ins_v2, human


def write_raw(out_dir, raw, ins_v2, human, data_files: str = "small") -> Path:
    """Write the three raw files under the names ``load_catalogue(data_files=...)`` reads."""
    from .catalogue import DATA_FILES
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, obj in zip(DATA_FILES[data_files], (raw, ins_v2, human)):
        (out / name).write_text(json.dumps(obj, ensure_ascii=False))
    return out
