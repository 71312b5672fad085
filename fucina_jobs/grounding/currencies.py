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
