"""The offline demo corpus: dates written the way people write them -> ISO dates.

A translation task that needs no download: the source is a date as a person might write it, the
target is the same date in ISO form. The task is small enough for a character-level model on a CPU,
and its attention is easy to read: each part of the ISO date should look at the matching source part.

    "tue 5 mar 2019"           -> "2019-03-05"
    "March 5th, 2019"          -> "2019-03-05"
    "05/03/19"                 -> "2019-03-05"

Dates run from 1900-01-01 to 2099-12-31 (73,049 days). Numeric forms with the year last put the day
first (05/03/2019 is 5 March), those with the year first are year, month, day (2019/03/05), and a
two-digit year always means 2000-2099, so those forms are only used for dates in that century.
Three forms put the year first: with one alone, a model can settle on "the year is at the end" and
never learn it.
Everything is deterministic from a seed, and `make_corpus` draws its test pairs from days that never
occur in training, so the model has to compose the answer rather than remember it.

Only the standard library is used; this module does not import TensorFlow.
"""

import datetime
import random

FIRST_DAY = datetime.date(1900, 1, 1)
LAST_DAY = datetime.date(2099, 12, 31)

_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

# The forms a date is written in, each a `str.format` template over the fields of `_fields`.
# The comment shows 2019-03-05 (a Tuesday) in the "title" case.
_TEMPLATES = {
    "day_month_year": "{d} {month} {yyyy}",  # 5 March 2019
    "day_mon_year": "{d} {mon} {yyyy}",  # 5 Mar 2019
    "month_day_year": "{month} {d}, {yyyy}",  # March 5, 2019
    "month_ordinal_year": "{month} {dth} {yyyy}",  # March 5th 2019
    "mon_ordinal_year": "{mon} {dth}, {yyyy}",  # Mar 5th, 2019
    "ordinal_of_month_year": "{dth} of {month} {yyyy}",  # 5th of March 2019
    "wkd_day_mon_year": "{wkd} {d} {mon} {yyyy}",  # Tue 5 Mar 2019
    "weekday_month_day_year": "{weekday}, {month} {d}, {yyyy}",  # Tuesday, March 5, 2019
    "year_month_day": "{yyyy} {month} {dd}",  # 2019 March 05
    "year_mon_day": "{yyyy} {mon} {d}",  # 2019 Mar 5
    "slash_ymd": "{yyyy}/{mm}/{dd}",  # 2019/03/05
    "slash_dmy": "{dd}/{mm}/{yyyy}",  # 05/03/2019
    "dash_dmy": "{dd}-{mm}-{yyyy}",  # 05-03-2019
    "slash_dmy_short": "{dd}/{mm}/{yy}",  # 05/03/19
    "dot_dmy_short": "{d}.{m}.{yy}",  # 5.3.19
}

# Names of every form, in a fixed order; see `_TEMPLATES` for an example of each.
FORMATS = tuple(_TEMPLATES)
# The forms with a two-digit year (read as 20yy), valid only for dates in 2000-2099.
TWO_DIGIT_YEAR_FORMATS = tuple(form for form, t in _TEMPLATES.items() if "{yy}" in t)
# How words are capitalized: "march", "March", "MARCH". Numeric forms look the same in every case.
CASES = ("lower", "title", "upper")


def _ordinal(day):
    """Returns `day` as an English ordinal: 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, ..."""
    if day % 100 in (11, 12, 13):
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _fields(date):
    """Returns the pieces the templates are made of, words in title case."""
    month, weekday = _MONTHS[date.month - 1], _WEEKDAYS[date.weekday()]
    return {
        "d": str(date.day), "dd": f"{date.day:02d}", "dth": _ordinal(date.day),
        "m": str(date.month), "mm": f"{date.month:02d}",
        "month": month, "mon": month[:3], "weekday": weekday, "wkd": weekday[:3],
        "yyyy": f"{date.year:04d}", "yy": f"{date.year % 100:02d}",
    }


def _iso(date):
    """Returns `date` as `YYYY-MM-DD` (also for a `datetime.datetime`, unlike `isoformat`)."""
    return f"{date.year:04d}-{date.month:02d}-{date.day:02d}"


def format_date(date, form, case="lower"):
    """Writes a date in one of the human forms of `FORMATS`.

    Args:
        date: `datetime.date`. The date to write.
        form: str. One of `FORMATS`, e.g. `"month_ordinal_year"`.
        case: str. One of `CASES`: `"lower"`, `"title"` (capitalized month and weekday names)
            or `"upper"`. Defaults to `"lower"`.

    Returns:
        str, the written date. Raises `ValueError` for an unknown form or case, and for a
        two-digit-year form (`TWO_DIGIT_YEAR_FORMATS`) when the year is outside 2000-2099.

    Example:
        >>> format_date(datetime.date(2019, 3, 5), "wkd_day_mon_year", "title")
        'Tue 5 Mar 2019'
    """
    if form not in _TEMPLATES:
        raise ValueError(f"form must be one of {FORMATS}. Received: form={form!r}")
    if case not in CASES:
        raise ValueError(f"case must be one of {CASES}. Received: case={case!r}")
    if form in TWO_DIGIT_YEAR_FORMATS and not 2000 <= date.year <= 2099:
        raise ValueError(
            f"form {form!r} writes a two-digit year, read as 2000-2099, so the date must lie in "
            f"2000-2099. Received: date={date!r}"
        )
    text = _TEMPLATES[form].format(**_fields(date))
    if case == "lower":
        return text.lower()
    return text.upper() if case == "upper" else text


def form_of(text, iso):
    """The form of `FORMATS` that writes the date `iso` (`"YYYY-MM-DD"`) as `text`, in any case.

    Returns None when no form does (a wrong pair, or a date written some other way).

    Example:
        >>> form_of("Tue 5 Mar 2019", "2019-03-05")
        'wkd_day_mon_year'
    """
    date = datetime.date.fromisoformat(iso)
    for form in _forms_for(date):
        if format_date(date, form).lower() == text.lower():
            return form
    return None


def _forms_for(date):
    """Returns the forms that can write `date` without ambiguity."""
    if 2000 <= date.year <= 2099:
        return FORMATS
    return tuple(form for form in FORMATS if form not in TWO_DIGIT_YEAR_FORMATS)


def _every_day():
    """Returns every day from `FIRST_DAY` to `LAST_DAY`, in order."""
    count = (LAST_DAY - FIRST_DAY).days + 1
    return [FIRST_DAY + datetime.timedelta(days=i) for i in range(count)]


def _check_count(name, value):
    """Raises `ValueError` unless `value` is a non-negative int (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int. Received: {name}={value!r}")


def generate(n, seed=0, dates=None):
    """Makes `n` (source, target) pairs: a written date and its ISO form.

    Each pair draws a date uniformly from `dates`, then a form uniformly among the forms valid for
    that date (two-digit years only for 2000-2099), then a case uniformly from `CASES`.

    Args:
        n: int. Number of pairs, >= 0.
        seed: int. Seed of the random draws; the same seed gives the same pairs. Defaults to `0`.
        dates: sequence of `datetime.date`, or `None` for every day from 1900-01-01 to
            2099-12-31. Defaults to `None`.

    Returns:
        list of `n` tuples `(source, target)`, e.g. `("march 5th 2019", "2019-03-05")`.

    Example:
        >>> pairs = generate(3, seed=1)
        >>> [len(target) for _, target in pairs]
        [10, 10, 10]
    """
    _check_count("n", n)
    pool = _every_day() if dates is None else list(dates)
    if n and not pool:
        raise ValueError(f"dates must not be empty when n > 0. Received: dates={dates!r}")
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        date = rng.choice(pool)
        source = format_date(date, rng.choice(_forms_for(date)), rng.choice(CASES))
        pairs.append((source, _iso(date)))
    return pairs


def split_dates(test_fraction=0.05, seed=0):
    """Partitions every day from 1900-01-01 to 2099-12-31 into train days and test days.

    The test days are a random sample (fixed by `seed`) of `round(73049 * test_fraction)` days,
    at least one; the train days are all the others.

    Args:
        test_fraction: float. Share of the days kept for testing, in (0, 1). Defaults to `0.05`.
        seed: int. Seed of the random sample. Defaults to `0`.

    Returns:
        tuple `(train_dates, test_dates)` of disjoint lists of `datetime.date`, each sorted.

    Example:
        >>> train, test = split_dates(0.05)
        >>> len(train), len(test)
        (69397, 3652)
    """
    if not (isinstance(test_fraction, (int, float)) and 0 < test_fraction < 1):
        raise ValueError(
            f"test_fraction must be a number in (0, 1). Received: test_fraction={test_fraction!r}"
        )
    days = _every_day()
    n_test = min(max(1, round(len(days) * test_fraction)), len(days) - 1)
    test = set(random.Random(seed).sample(days, n_test))
    train = [day for day in days if day not in test]
    return train, sorted(test)


def make_corpus(n_train=30000, n_test=1000, seed=0):
    """Makes the demo corpus: training pairs and test pairs whose dates never meet.

    The days are split with `split_dates(seed=seed)` (5% for testing). Training pairs are drawn
    from the training days with `seed`, test pairs from the test days with `seed + 1`, so the test
    pairs do not change when `n_train` does.

    Args:
        n_train: int. Number of training pairs, >= 0. Defaults to `30000`.
        n_test: int. Number of test pairs, >= 0. Defaults to `1000`.
        seed: int. Seed of the split and of the draws. Defaults to `0`.

    Returns:
        tuple `(train_pairs, test_pairs)`, lists of `(source, target)` as from `generate`; no
        target of `test_pairs` occurs among the targets of `train_pairs`.

    Example:
        >>> train, test = make_corpus(n_train=100, n_test=10)
        >>> len(train), len(test)
        (100, 10)
    """
    _check_count("n_train", n_train)
    _check_count("n_test", n_test)
    train_dates, test_dates = split_dates(seed=seed)
    train = generate(n_train, seed=seed, dates=train_dates)
    test = generate(n_test, seed=seed + 1, dates=test_dates)
    return train, test
