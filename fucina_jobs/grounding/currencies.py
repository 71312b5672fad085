"""The signs and words texts write ISO 4217 currencies with: what shows a currency enum's member where the text
writes no code (``€ 12,00`` is EUR), for any schema whose enum lists codes and spells none of them itself.

A fact about currencies, not about one data set: a sign shared by several (``kr``) shows each of them, and
``prefer_members`` then holds a code the text writes itself over one a sign alone shows.
"""

from __future__ import annotations

#: ISO 4217 code -> the other ways a text writes it, as ``x-grounded.spellings`` lists them.
SIGNS: dict[str, tuple[str, ...]] = {
    "USD": ("$", "US$"),
    "EUR": ("€", "Euro", "euro"),
    "GBP": ("£",),
    "CHF": ("Fr.",),
    "JPY": ("¥", "円"),
    "CAD": ("C$", "CA$"),
    "AUD": ("A$", "AU$"),
    "NZD": ("NZ$",),
    "CNY": ("RMB", "CN¥", "元"),
    "HKD": ("HK$",),
    "SGD": ("S$",),
    "INR": ("₹", "Rs.", "Rs"),
    "PLN": ("zł",),
    "SEK": ("kr",),
    "NOK": ("kr",),
    "DKK": ("kr.",),
    "CZK": ("Kč",),
    "HUF": ("Ft",),
    "RON": ("lei",),
    "TRY": ("₺",),
    "RUB": ("₽", "руб."),
    "UAH": ("₴", "грн"),
    "BRL": ("R$",),
    "MXN": ("MX$",),
    "NGN": ("₦",),
    "ILS": ("₪",),
    "KRW": ("₩", "원"),
    "THB": ("฿",),
    "MYR": ("RM",),
    "PHP": ("₱",),
    "VND": ("₫",),
}

#: The ISO 4217 codes a text writes beside an amount (``CHF 6'750.00``, ``1,450.00 CAD``).
CODES: tuple[str, ...] = tuple(
    "USD EUR GBP CHF JPY CAD AUD NZD CNY RMB INR SEK NOK DKK ISK PLN CZK HUF RON BGN TRY RUB UAH BRL MXN ARS CLP COP ZAR SGD HKD TWD KRW THB MYR IDR PHP VND AED SAR ILS EGP NGN KES".split()
)

#: ISO 4217 code -> the English names a text writes an amount in words with (``Five Thousand Dollars``), singular
#: and plural; a name several currencies share (``dollars``) names each of them.
NAMES: dict[str, tuple[str, ...]] = {
    "USD": ("dollar", "dollars"),
    "EUR": ("euro", "euros"),
    "GBP": ("pound", "pounds", "pounds sterling"),
    "CHF": ("franc", "francs", "Swiss francs"),
    "JPY": ("yen",),
    "CNY": ("yuan", "renminbi"),
    "INR": ("rupee", "rupees"),
    "MYR": ("ringgit",),
    "PHP": ("peso", "pesos"),
    "ZAR": ("rand",),
}
