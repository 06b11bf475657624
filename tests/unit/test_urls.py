import pytest

from schemas.events import canonical_ip
from workers.stages.short_circuit import BanList
from workers.urls import domain_candidates, extract_links


@pytest.mark.parametrize(
    ("text", "url", "domain"),
    [
        (r"update now http:\\www.micr.osoftr.com\update", "http://www.micr.osoftr.com/update", "osoftr.com"),
        ("hxxp://evil[.]com/x?y=1.", "http://evil.com/x?y=1", "evil.com"),
        ("HXXPS://Bad(dot)Example.CO.UK/a", "https://bad.example.co.uk/a", "example.co.uk"),
        ("go to www.shop.example.org, now!", "http://www.shop.example.org", "example.org"),
        ("http:/single.slash.net/p", "http://single.slash.net/p", "slash.net"),
        ("raw ip http://1.2.3.4/x", "http://1.2.3.4/x", "1.2.3.4"),
    ],
)
def test_obfuscated_links_are_found(text: str, url: str, domain: str) -> None:
    (link,) = extract_links(text)
    assert (link.url, link.domain) == (url, domain)


def test_explicit_urls_come_first_and_duplicates_collapse() -> None:
    links = extract_links("see https://b.com/x and https://a.com/", ["https://a.com/", "https://c.org"])
    assert [lk.url for lk in links] == ["https://a.com/", "https://c.org", "https://b.com/x"]


def test_explicit_urls_are_defanged_too() -> None:
    (link,) = extract_links("", ["hxxps://a.b.evil[.]com/x"])
    assert (link.host, link.domain, link.suffix, link.subdomain_depth) == ("a.b.evil.com", "evil.com", "com", 2)


def test_plain_words_are_not_links() -> None:
    assert extract_links("e.g. this is fine. version 1.2 of file.txt") == ()


def test_parent_domains_stop_at_the_public_suffix() -> None:
    assert domain_candidates("a.b.evil.co.uk") == ("a.b.evil.co.uk", "b.evil.co.uk", "evil.co.uk")


def test_unknown_suffixes_and_ips_still_match_sensibly() -> None:
    assert domain_candidates("promo.evil.example") == ("promo.evil.example", "evil.example")
    assert domain_candidates("10.0.0.1") == ("10.0.0.1",)


def test_ban_matches_parents_but_not_siblings() -> None:
    bans = BanList.parse(["evil.com", "bad.sub.ok.org"], [])
    assert bans.domain_hit("x.y.evil.com") == "evil.com"
    assert bans.domain_hit("evil.com") == "evil.com"
    assert bans.domain_hit("notevil.com") is None
    assert bans.domain_hit("deeper.bad.sub.ok.org") == "bad.sub.ok.org"
    assert bans.domain_hit("ok.org") is None


def test_ban_matches_addresses_and_ranges() -> None:
    bans = BanList.parse([], ["198.51.100.7", "203.0.113.0/24", "2001:db8::/32", "2001:DB8:0:0::5"])
    assert bans.ip_hit("198.51.100.7") == "198.51.100.7"
    assert bans.ip_hit("203.0.113.200") == "203.0.113.0/24"
    assert bans.ip_hit("203.0.113.0") == "203.0.113.0/24"
    assert bans.ip_hit("203.0.114.0") is None
    assert bans.ip_hit("2001:db8::1") == "2001:db8::/32"
    assert bans.ip_hit("2001:db9::1") is None
    assert bans.ip_hit("198.51.100.8") is None
    assert bans.ip_hit("::ffff:203.0.113.1") is None  # an IPv6 address is not matched against IPv4 ranges
    assert bans.ip_hit(canonical_ip("2001:0DB8::0005")) == "2001:db8::5"


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [("198.51.100.7", "198.51.100.7"), ("2001:0DB8:0:0::1", "2001:db8::1"), ("::ffff:1.2.3.4", "::ffff:1.2.3.4")],
)
def test_ips_are_validated_and_canonicalised(raw: str, canonical: str) -> None:
    assert canonical_ip(raw) == canonical


@pytest.mark.parametrize("bad", ["198.51.100", "198.51.100.256", "01.2.3.4", "1.2.3.4/24", "host", "2001:db8::g", ""])
def test_bad_ips_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="IPv4 or IPv6"):
        canonical_ip(bad)
