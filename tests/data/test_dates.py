"""Tests for tfattn.data.dates, the offline demo corpus (dates as people write them -> ISO)."""

import ast
import datetime

import pytest

from tfattn.data import dates

D = datetime.date  # short alias for the many dates below
TUESDAY = D(2019, 3, 5)
# 200 years, of which 49 are leap years (1904, 1908, ..., 2096; 1900 is not, 2000 is):
# 200 * 365 + 49 = 73049 days.
N_DAYS = 73049
NUMERIC_FORMS = ("slash_dmy", "dash_dmy", "slash_dmy_short", "dot_dmy_short", "slash_ymd")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def parse_numeric(text):
    """Reads a numeric date: year first ("2019/03/05") or day first ("05/03/2019", "5.3.19"), where a
    two-digit year means 20yy."""
    sep = next(c for c in text if not c.isdigit())
    first, month, last = text.split(sep)
    day, year = (last, first) if len(first) == 4 else (first, last)
    return D(int(year) + (2000 if len(year) == 2 else 0), int(month), int(day))


def every_day():
    return {D(1900, 1, 1) + datetime.timedelta(days=i) for i in range(N_DAYS)}


def test_module_uses_standard_library_only():
    with open(dates.__file__) as f:
        tree = ast.parse(f.read())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    assert not any(isinstance(node, ast.ImportFrom) for node in ast.walk(tree))
    assert imported == {"datetime", "random"}


# Every form writing 2019-03-05 (a Tuesday), each with one case to check besides lower and upper.
EXAMPLES = [
    ("day_month_year", "title", "5 March 2019"),
    ("month_day_year", "title", "March 5, 2019"),
    ("month_ordinal_year", "lower", "march 5th 2019"),
    ("wkd_day_mon_year", "title", "Tue 5 Mar 2019"),
    ("weekday_month_day_year", "lower", "tuesday, march 5, 2019"),
    ("slash_dmy", "lower", "05/03/2019"),
    ("year_month_day", "lower", "2019 march 05"),
    ("year_mon_day", "title", "2019 Mar 5"),
    ("slash_ymd", "lower", "2019/03/05"),
    ("dot_dmy_short", "lower", "5.3.19"),
    ("day_mon_year", "lower", "5 mar 2019"),
    ("dash_dmy", "lower", "05-03-2019"),
    ("mon_ordinal_year", "title", "Mar 5th, 2019"),
    ("ordinal_of_month_year", "title", "5th of March 2019"),
    ("slash_dmy_short", "lower", "05/03/19"),
]


@pytest.mark.parametrize("form, case, expected", EXAMPLES)
def test_each_form_writes_march_5_2019(form, case, expected):
    assert dates.format_date(TUESDAY, form, case) == expected
    assert dates.format_date(TUESDAY, form) == expected.lower()
    assert dates.format_date(TUESDAY, form, "upper") == expected.upper()


def test_examples_cover_every_form():
    forms = [form for form, _, _ in EXAMPLES]
    assert sorted(forms) == sorted(dates.FORMATS) and len(set(forms)) == len(forms)


@pytest.mark.parametrize(
    "day, ordinal",
    [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"),
     (13, "13th"), (21, "21st"), (22, "22nd"), (23, "23rd"), (31, "31st")],
)
def test_ordinals(day, ordinal):
    assert dates.format_date(D(2019, 1, day), "month_ordinal_year") == f"january {ordinal} 2019"


@pytest.mark.parametrize(
    "date, weekday",
    [(D(1900, 1, 1), "monday"), (D(1969, 7, 20), "sunday"), (D(2000, 2, 29), "tuesday"),
     (D(2099, 12, 31), "thursday")],
)
def test_weekday_is_the_true_weekday(date, weekday):
    assert WEEKDAYS[date.weekday()] == weekday  # the hand-known answer agrees with datetime
    assert dates.format_date(date, "weekday_month_day_year").startswith(weekday + ", ")
    assert dates.format_date(date, "wkd_day_mon_year").startswith(weekday[:3] + " ")


@pytest.mark.parametrize(
    "date, dot, slash",
    [(D(2000, 1, 1), "1.1.00", "01/01/00"), (D(2099, 12, 31), "31.12.99", "31/12/99")],
)
def test_two_digit_year_covers_2000_to_2099(date, dot, slash):
    assert dates.format_date(date, "dot_dmy_short") == dot
    assert dates.format_date(date, "slash_dmy_short") == slash


@pytest.mark.parametrize("form", dates.TWO_DIGIT_YEAR_FORMATS)
def test_two_digit_year_refuses_1999(form):
    with pytest.raises(ValueError, match=r"date=datetime\.date\(1999, 12, 31\)"):
        dates.format_date(D(1999, 12, 31), form)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: dates.format_date(TUESDAY, "iso"), "form='iso'"),
        (lambda: dates.format_date(TUESDAY, "slash_dmy", "camel"), "case='camel'"),
        (lambda: dates.generate(-1), "n=-1"),
        (lambda: dates.generate(1.5), "n=1.5"),
        (lambda: dates.generate(True), "n=True"),
        (lambda: dates.generate(1, dates=[]), r"dates=\[\]"),
        (lambda: dates.split_dates(0), "test_fraction=0"),
        (lambda: dates.split_dates(1.0), "test_fraction=1.0"),
        (lambda: dates.split_dates("0.1"), "test_fraction='0.1'"),
        (lambda: dates.make_corpus(n_train=-2), "n_train=-2"),
        (lambda: dates.make_corpus(n_test=None), "n_test=None"),
    ],
)
def test_errors_name_the_bad_value(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_unknown_form_lists_the_choices():
    with pytest.raises(ValueError, match="dot_dmy_short"):
        dates.format_date(TUESDAY, "iso")


def test_generate_is_deterministic():
    assert dates.generate(50, seed=0) == dates.generate(50, seed=0)
    assert dates.generate(50, seed=0) != dates.generate(50, seed=1)
    assert dates.generate(0) == []


def test_generated_pairs_are_correct():
    for source, target in dates.generate(500, seed=3):
        date = D.fromisoformat(target)
        assert target == f"{date.year:04d}-{date.month:02d}-{date.day:02d}"
        assert D(1900, 1, 1) <= date <= D(2099, 12, 31)
        if set(source) <= set("0123456789/-."):  # a numeric form
            assert parse_numeric(source) == date, source
        forms = [f for f in dates.FORMATS
                 if 2000 <= date.year or f not in dates.TWO_DIGIT_YEAR_FORMATS]
        assert source in {dates.format_date(date, f, c) for f in forms for c in dates.CASES}


@pytest.mark.parametrize("form", NUMERIC_FORMS)
def test_numeric_forms_round_trip(form):
    for date in (D(2000, 1, 1), D(2019, 3, 5), D(2031, 12, 25), D(2099, 12, 31)):
        assert parse_numeric(dates.format_date(date, form)) == date


def test_generate_uses_every_valid_form_and_case():
    sources = {s for s, _ in dates.generate(400, dates=[TUESDAY])}
    for form in dates.FORMATS:
        assert sources & {dates.format_date(TUESDAY, form, c) for c in dates.CASES}, form
    assert {"march 5th 2019", "March 5th 2019", "MARCH 5TH 2019"} <= sources


def test_generate_never_writes_two_digit_years_before_2000():
    sources = {s for s, _ in dates.generate(300, dates=[D(1999, 3, 5)])}
    assert "5.3.99" not in sources and "05/03/99" not in sources
    assert "05/03/1999" in sources


def test_split_dates_partitions_every_day():
    train, test = dates.split_dates()
    assert len(test) == 3652  # round(73049 * 0.05) = round(3652.45)
    assert len(train) + len(test) == N_DAYS
    assert not set(train) & set(test)
    assert set(train) | set(test) == every_day()
    assert (dates.LAST_DAY - dates.FIRST_DAY).days + 1 == N_DAYS


def test_split_dates_is_deterministic():
    assert dates.split_dates(0.01, seed=4) == dates.split_dates(0.01, seed=4)
    assert dates.split_dates(0.01, seed=4)[1] != dates.split_dates(0.01, seed=5)[1]


def test_make_corpus_keeps_test_dates_out_of_training():
    train, test = dates.make_corpus(n_train=3000, n_test=200, seed=2)
    assert len(train) == 3000 and len(test) == 200
    assert not {t for _, t in test} & {t for _, t in train}
    _, test_dates = dates.split_dates(seed=2)
    assert {t for _, t in test} <= {d.isoformat() for d in test_dates}


def test_make_corpus_test_pairs_do_not_depend_on_n_train():
    assert dates.make_corpus(10, 20)[1] == dates.make_corpus(30, 20)[1]


@pytest.mark.parametrize("text, iso, form", [
    ("Tue 5 Mar 2019", "2019-03-05", "wkd_day_mon_year"),
    ("MARCH 5TH 2019", "2019-03-05", "month_ordinal_year"),
    ("05/03/19", "2019-03-05", "slash_dmy_short"),
    ("05/03/2019", "2019-03-05", "slash_dmy"),
    ("5.3.19", "2019-03-05", "dot_dmy_short"),
    ("5.3.19", "1919-03-05", None),      # a two-digit year means 20yy, so not 1919
    ("06/03/2019", "2019-03-05", None),  # another day
])
def test_form_of_names_the_form_that_writes_the_date(text, iso, form):
    assert dates.form_of(text, iso) == form


def test_form_of_finds_the_form_of_every_generated_pair():
    for (text, iso), form in zip(dates.generate(200, seed=3), dates.FORMATS * 20):
        assert dates.form_of(text, iso) is not None, (text, iso)
    date = datetime.date(2019, 3, 5)
    assert [dates.form_of(dates.format_date(date, f, "upper"), "2019-03-05") for f in dates.FORMATS] == list(
        dates.FORMATS)
