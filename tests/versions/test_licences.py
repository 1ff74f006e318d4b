"""Licence classes are derived from SPDX expressions the way a lawyer would read them."""

import pytest

from corpus.select.licences import licence_class


@pytest.mark.parametrize(
    ("expression", "cls"),
    [
        ("MIT", "permissive"),
        ("Apache-2.0 WITH LLVM-exception", "permissive"),
        ("GPL-2.0-only", "strong_copyleft"),
        ("LGPL-2.1-or-later", "weak_copyleft"),
        ("CC-BY-NC-SA-4.0", "noncommercial"),
        ("CC-BY-SA-4.0", "strong_copyleft"),
        ("CC0-1.0", "public_domain"),
        ("", "unknown"),
        ("LicenseRef-custom", "unknown"),
    ],
)
def test_a_single_licence_id_has_its_family_class(expression, cls):
    assert licence_class(expression) == cls


def test_or_offers_a_choice_so_the_least_restrictive_alternative_applies():
    # Perl's own documentation: a user may take it under the Artistic licence
    assert licence_class("Artistic-1.0-Perl OR GPL-1.0-or-later") == "permissive"
    assert licence_class("LicenseRef-x OR GPL-3.0-only") == "strong_copyleft"


def test_and_adds_obligations_so_the_most_restrictive_part_applies():
    assert licence_class("MIT AND GPL-3.0-only") == "strong_copyleft"
    assert licence_class("(MIT OR GPL-2.0-only) AND CC-BY-NC-4.0") == "noncommercial"
    assert licence_class("MIT AND LicenseRef-unknown") == "unknown"
