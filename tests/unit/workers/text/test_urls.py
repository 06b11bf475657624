import pytest

from schemas.events import canonical_ip
from workers.stages.short_circuit import BanList
from workers.text.urls import POPULAR, SHARED, ascii_host, domain_candidates, extract_links, reduce_links


@pytest.mark.parametrize(
    ("text", "url", "domain"),
    [
        (r"update now http:\\www.micr.osoftr.com\update", "http://www.micr.osoftr.com/update", "osoftr.com"),
        ("hxxp://evil[.]com/x?y=1.", "http://evil.com/x?y=1", "evil.com"),
        ("HXXPS://Bad(dot)Example.CO.UK/a", "https://bad.example.co.uk/a", "example.co.uk"),
        ("go to www.shop.example.org, now!", "http://www.shop.example.org", "example.org"),
        ("http:/single.slash.net/p", "http://single.slash.net/p", "slash.net"),
        ("raw ip http://1.2.3.4/x", "http://1.2.3.4/x", "1.2.3.4"),
        # Without a scheme: a public suffix makes a host a link.
        ("order at cheap-pills.com/now!", "http://cheap-pills.com/now", "cheap-pills.com"),
        ("visit evil[.]com", "http://evil.com", "evil.com"),
        ("Shop.Example.co.uk today", "http://shop.example.co.uk", "example.co.uk"),
        ("GO TO EVIL.COM", "http://evil.com", "evil.com"),
        # Unicode hosts in punycode, with or without a scheme.
        (
            "\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444/x",
            "http://xn--e1afmkfd.xn--p1ai/x",
            "xn--e1afmkfd.xn--p1ai",
        ),
        ("https://M\u00fcnchen.de/a", "https://xn--mnchen-3ya.de/a", "xn--mnchen-3ya.de"),
        ("XN--E1AFMKFD.XN--P1AI", "http://xn--e1afmkfd.xn--p1ai", "xn--e1afmkfd.xn--p1ai"),
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


@pytest.mark.parametrize(
    "text",
    [
        "e.g. this is fine. version 1.2 of file.txt",
        "i.e. at 5 p.m. in the U.S. with v1.2.3, 3.14 and node.js",
        "I said hi.How are you",  # a missing space before a capital is no link
        "write to jo3@ex4mple.com",  # an e-mail address is not a link
        "see backup.tar.gz and notes.txt",
    ],
)
def test_plain_words_are_not_links(text: str) -> None:
    assert extract_links(text) == ()


def test_bare_links_reduce_like_links() -> None:
    assert reduce_links("buy at cheap-pills.com/a1?x=2 now, or evil[.]com") == "buy at cheap-pills.com now, or evil.com"


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444.", "xn--e1afmkfd.xn--p1ai"),
        ("Example.COM", "example.com"),
        ("bad\u2764host.com", "bad\u2764host.com"),  # IDNA 2008 refuses emoji: kept, never raised
        ("a" * 70 + "\u00e9.com", "a" * 70 + "\u00e9.com"),  # a label too long to encode
    ],
)
def test_hosts_have_one_form(host: str, expected: str) -> None:
    assert ascii_host(host) == expected


def test_bans_match_a_host_in_either_form() -> None:
    unicode_ban = BanList.parse(["\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444"], [])
    punycode_ban = BanList.parse(["XN--E1AFMKFD.xn--p1ai"], [])
    for text in ["\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444", "http://www.xn--e1afmkfd.xn--p1ai/x"]:
        (link,) = extract_links(text)
        assert unicode_ban.domain_hit(link.host) == punycode_ban.domain_hit(link.host) == "xn--e1afmkfd.xn--p1ai"


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


@pytest.mark.parametrize(
    ("url", "landing"),
    [
        ("https://www.bbc.co.uk/news/world-123/", "bbc.co.uk/news/world-123"),
        ("http://bbc.co.uk/news/world-123?utm_source=app&fbclid=x#top", "bbc.co.uk/news/world-123"),
        ("https://www.youtube.com/watch?v=dQw4w9WgXcQ&si=abc", "youtube.com/watch?v=dQw4w9WgXcQ"),
        ("https://s1.cheap-pills.xyz/buy?ref=9&id=3", "s1.cheap-pills.xyz/buy?id=3"),
    ],
)
def test_a_links_landing_is_the_page_however_it_was_shared(url: str, landing: str) -> None:
    (link,) = extract_links("", [url])
    assert link.landing == landing


def test_a_template_reduces_every_link_to_its_domain_on_any_host() -> None:
    """A share button's sentence with each sharer's own link and a campaign's copies with a path each
    are one template alike: what tells them apart is the domain's age and the accounts (signals.py)."""
    for host in ("www.youtube.com", "tunewave.example", "brightpagehub.net"):
        button = f"Check this out: https://{host}/v/{{}}"
        assert reduce_links(button.format("abc")) == reduce_links(button.format("xyz"))


def test_popularity_comes_from_a_broad_ranking_and_never_from_a_redirector_or_shared_host() -> None:
    assert {"youtube.com", "bbc.co.uk", "github.com"} <= POPULAR
    assert len(POPULAR) > 100_000
    assert not {"bit.ly", "tinyurl.com", "t.co", "github.io", "blogspot.com"} & POPULAR
    assert {"bit.ly", "github.io"} <= SHARED
