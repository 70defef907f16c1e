"""Markdown from one markdown-it-py parse, rendered as Telegram HTML and as Slack mrkdwn: each construct per platform,
and no input, however broken, gives Telegram HTML it would refuse."""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable

import pytest
from fakes.telegram import parse_html

from channels.markdown import RULE, plain
from channels.markup_slack import markdown_to_mrkdwn as slack
from channels.markup_telegram import markdown_to_html as telegram

# --- emphasis -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("markdown", "html", "mrkdwn"),
    [
        ("**bold** and __bold__", "<b>bold</b> and <b>bold</b>", "*bold* and *bold*"),
        ("*it* and _it_", "<i>it</i> and <i>it</i>", "_it_ and _it_"),
        ("~~gone~~", "<s>gone</s>", "~gone~"),
        ("~5 minutes~", "~5 minutes~", "~5 minutes~"),  # one tilde is not strike
        ("***both***", "<b><i>both</i></b>", "*_both_*"),
        ("**bold _and it_**", "<b>bold <i>and it</i></b>", "*bold _and it_*"),
        ("**outer **inner** outer**", "<b>outer inner outer</b>", "*outer inner outer*"),  # never nested in itself
        ("||secret||", "<tg-spoiler>secret</tg-spoiler>", "||secret||"),  # Slack has no spoiler
        ("||a **b**||", "<tg-spoiler>a <b>b</b></tg-spoiler>", "||a *b*||"),
        ("x || y and a|b", "x || y and a|b", "x || y and a|b"),
        ("snake_case_name", "snake_case_name", "snake_case_name"),
        ("2*3*4 and 2 * 3 * 4", "2*3*4 and 2 * 3 * 4", "2*3*4 and 2 * 3 * 4"),  # arithmetic, not italics
        ("foo**bar**", "foo<b>bar</b>", "foo**bar**"),  # Slack shows bold only at a word's edges
        ("** not bold **", "** not bold **", "** not bold **"),
        ("\\*literal\\* and \\_x\\_", "*literal* and _x_", "*literal* and _x_"),
    ],
)
def test_emphasis(markdown: str, html: str, mrkdwn: str) -> None:
    assert telegram(markdown) == html
    assert slack(markdown) == mrkdwn


# --- escaping -----------------------------------------------------------------------------------------------------


def test_text_is_escaped_and_raw_html_is_only_text() -> None:
    text = "a < b && c > d <b>not bold</b> <script>x</script>"
    assert telegram(text) == "a &lt; b &amp;&amp; c &gt; d &lt;b&gt;not bold&lt;/b&gt; &lt;script&gt;x&lt;/script&gt;"
    assert slack(text) == "a &lt; b &amp;&amp; c &gt; d &lt;b&gt;not bold&lt;/b&gt; &lt;script&gt;x&lt;/script&gt;"
    block = "<div>\n<b>hi</b>\n</div>"  # an HTML block in CommonMark: text here
    assert telegram(block) == "&lt;div&gt;\n&lt;b&gt;hi&lt;/b&gt;\n&lt;/div&gt;"


def test_entities_in_the_source_are_read_then_escaped_again() -> None:
    assert telegram("AT&amp;T &lt;x&gt; &copy;") == "AT&amp;T &lt;x&gt; ©"
    assert slack("AT&amp;T &lt;x&gt;") == "AT&amp;T &lt;x&gt;"


def test_slack_text_never_becomes_a_mention_or_a_link() -> None:
    assert (
        slack("<@U123> <!channel> <!here|here> <#C1>")
        == "&lt;@U123&gt; &lt;!channel&gt; &lt;!here|here&gt; &lt;#C1&gt;"
    )
    assert slack("**<!everyone>**") == "*&lt;!everyone&gt;*"


# --- code ---------------------------------------------------------------------------------------------------------


def test_a_fence_with_a_language() -> None:
    text = "```python\nif a < b and '**x**' & c:\n    pass\n```"
    assert telegram(text) == (
        "<pre><code class=\"language-python\">if a &lt; b and '**x**' &amp; c:\n    pass</code></pre>"
    )
    assert slack(text) == "```\nif a &lt; b and '**x**' &amp; c:\n    pass\n```"


def test_a_fence_without_a_language_and_tildes() -> None:
    assert telegram("~~~\n<tag> ||x|| _y_\n~~~") == "<pre>&lt;tag&gt; ||x|| _y_</pre>"
    assert slack("~~~\n<tag> ||x|| _y_\n~~~") == "```\n&lt;tag&gt; ||x|| _y_\n```"


def test_a_language_that_is_not_a_word_is_dropped() -> None:
    assert telegram('```"><script>\nx\n```') == "<pre>x</pre>"


def test_an_unclosed_fence_runs_to_the_end() -> None:
    streaming = "Here:\n```js\nconst a = '<b>';\n**not bold**"
    assert telegram(streaming) == (
        "Here:\n<pre><code class=\"language-js\">const a = '&lt;b&gt;';\n**not bold**</code></pre>"
    )
    assert slack(streaming) == "Here:\n```\nconst a = '&lt;b&gt;';\n**not bold**\n```"


def test_an_empty_fence() -> None:
    assert telegram("```\n```") == "<pre></pre>"
    assert slack("```\n```") == "``` ```"


def test_code_spans_keep_their_text() -> None:
    assert telegram("run `rm -rf *` or `a<b>&c` **now**") == (
        "run <code>rm -rf *</code> or <code>a&lt;b&gt;&amp;c</code> <b>now</b>"
    )
    assert slack("run `rm -rf *` or `a<b>&c` **now**") == "run `rm -rf *` or `a&lt;b&gt;&amp;c` *now*"
    assert telegram("``a ` b``") == "<code>a ` b</code>"


def test_an_indented_code_block() -> None:
    assert telegram("text\n\n    x = <1>") == "text\n\n<pre>x = &lt;1&gt;</pre>"
    assert slack("text\n\n    x = <1>") == "text\n\n```\nx = &lt;1&gt;\n```"


# --- links --------------------------------------------------------------------------------------------------------


def test_links() -> None:
    text = "see [the docs](https://x.test/a?b=1&c=2) now"
    assert telegram(text) == 'see <a href="https://x.test/a?b=1&amp;c=2">the docs</a> now'
    assert slack(text) == "see <https://x.test/a?b=1&amp;c=2|the docs> now"


def test_links_with_special_characters_in_url_and_label() -> None:
    text = '[a <b> & "c" | d](https://x.test/p?q=<1>&r="2"|s)'
    assert telegram(text) == '<a href="https://x.test/p?q=%3C1%3E&amp;r=%222%22%7Cs">a &lt;b&gt; &amp; "c" | d</a>'
    assert slack(text) == '<https://x.test/p?q=%3C1%3E&amp;r=%222%22%7Cs|a &lt;b&gt; &amp; "c" | d>'


def test_link_labels_keep_emphasis_but_code_inside_is_text() -> None:
    assert telegram("[**bold** `code`](https://x.test)") == '<a href="https://x.test"><b>bold</b> code</a>'
    assert slack("[**bold** `code`](https://x.test)") == "<https://x.test|*bold* code>"


def test_autolinks_and_bare_urls() -> None:
    assert telegram("<https://a.test/x|y>") == '<a href="https://a.test/x%7Cy">https://a.test/x|y</a>'
    assert slack("<https://a.test/x|y>") == "<https://a.test/x%7Cy>"
    assert slack("[https://a.test](https://a.test)") == "<https://a.test>"
    assert telegram("go to https://a.test/?a=1&b=2") == "go to https://a.test/?a=1&amp;b=2"


def test_links_that_lead_nowhere_in_a_chat_are_text() -> None:
    assert telegram("[click](javascript:alert(1))") == "[click](javascript:alert(1))"
    assert slack("[click](javascript:alert(1))") == "[click](javascript:alert(1))"
    assert telegram("[readme](./README.md)") == "readme (./README.md)"
    assert slack("[readme](./README.md)") == "readme (./README.md)"


def test_an_image_becomes_a_link() -> None:
    assert telegram("![a chart](https://x.test/c.png)") == '<a href="https://x.test/c.png">a chart</a>'
    assert slack("![a chart](https://x.test/c.png)") == "<https://x.test/c.png|a chart>"


# --- blocks -------------------------------------------------------------------------------------------------------


def test_headings_are_bold_lines() -> None:
    text = "# Plan\n## Step **one**\nSetext\n===\nbody"
    assert telegram(text) == "<b>Plan</b>\n<b>Step one</b>\n<b>Setext</b>\nbody"
    assert slack(text) == "*Plan*\n*Step one*\n*Setext*\nbody"


def test_paragraphs_and_line_breaks_are_kept() -> None:
    text = "one\ntwo  \nthree\n\n\nfour"
    assert telegram(text) == "one\ntwo\nthree\n\nfour"
    assert slack(text) == "one\ntwo\nthree\n\nfour"


def test_a_rule() -> None:
    assert telegram("a\n\n---\n\nb") == f"a\n\n{RULE}\n\nb"
    assert slack("a\n\n***\n\nb") == f"a\n\n{RULE}\n\nb"


def test_lists_nest_with_indentation() -> None:
    text = "- one\n- two\n  - two a\n  - two b\n    1. deep\n    2. deeper\n- three"
    expected = "• one\n• two\n  • two a\n  • two b\n    1. deep\n    2. deeper\n• three"
    assert telegram(text) == expected
    assert slack(text) == expected


def test_ordered_lists_count_from_their_start() -> None:
    assert telegram("3. c\n3. d\n3. e") == "3. c\n4. d\n5. e"
    assert slack("1) **a**\n1) b") == "1. *a*\n2. b"


def test_a_loose_list_and_a_second_paragraph_in_an_item() -> None:
    text = "1. first\n\n   more about first\n\n2. second"
    assert telegram(text) == "1. first\n\n   more about first\n\n2. second"
    assert slack(text) == "1. first\n\n   more about first\n\n2. second"


def test_code_inside_a_list_item() -> None:
    text = "- run:\n  ```sh\n  ls <dir>\n  ```"
    assert telegram(text) == '• run:\n  <pre><code class="language-sh">ls &lt;dir&gt;</code></pre>'
    assert slack(text) == "• run:\n  ```\n  ls &lt;dir&gt;\n  ```"


def test_quotes() -> None:
    text = "> quoted & <b>\n> **two**\n\nafter"
    assert telegram(text) == "<blockquote>quoted &amp; &lt;b&gt;\n<b>two</b></blockquote>\n\nafter"
    assert slack(text) == "> quoted &amp; &lt;b&gt;\n> *two*\n\nafter"


def test_a_quote_in_a_quote() -> None:
    text = "> outer\n>\n> > inner"
    assert telegram(text) == "<blockquote>outer\n\n&gt; inner</blockquote>"  # Telegram cannot nest blockquotes
    assert slack(text) == "> outer\n>\n> > inner"


def test_a_list_in_a_quote_and_a_quote_in_a_list() -> None:
    assert telegram("> - a\n> - b") == "<blockquote>• a\n• b</blockquote>"
    assert slack("> - a\n> - b") == "> • a\n> • b"
    assert telegram("- a\n  > q") == "• a\n  <blockquote>q</blockquote>"


def test_windows_line_endings() -> None:
    assert telegram("# T\r\n\r\n- a\r\n- b\r\n\r\nend") == "<b>T</b>\n\n• a\n• b\n\nend"
    assert slack("one\r\ntwo\r\rthree") == "one\ntwo\n\nthree"


def test_empty_and_blank_input() -> None:
    for text in ("", "\n\n", "   "):
        assert telegram(text) == ""
        assert slack(text) == ""


# --- Telegram never gets HTML it would refuse ---------------------------------------------------------------------

_PIECES = [
    "**",
    "*",
    "__",
    "_",
    "~~",
    "||",
    "`",
    "```",
    "[",
    "](",
    ")",
    "<",
    ">",
    "&",
    "# ",
    "- ",
    "> ",
    "\n",
    "x",
    " ",
]
_TAG = re.compile(r"<(/?)([a-z-]+)[^>]*>")


def _entity_rules_hold(html: str) -> bool:
    """Telegram's nesting rules: nothing inside code or pre (but pre's one code), no blockquote or link in itself."""
    stack: list[str] = []
    for match in _TAG.finditer(html):
        closing, name = match.group(1), match.group(2)
        if closing:
            stack.pop()
            continue
        if "code" in stack:
            return False
        if stack and stack[-1] == "pre" and name != "code":
            return False
        if name in ("blockquote", "a") and name in stack:
            return False
        stack.append(name)
    return True


def _samples() -> list[str]:
    samples = ["".join(combo) for combo in itertools.product(_PIECES, repeat=3)]
    samples += ["*a **b* c**", "**a *b** c*", "[a **b](c**)", "`a **b` c**", "||a **b|| c**", "~~a **b~~ c**"]
    samples += ["> **a\n> b**", "- **a\n- b**", "```\n**a\n```\n**b", "# **a\nb**", "[x](https://y.test/**) **z"]
    return samples


def test_malformed_markdown_never_gives_html_telegram_refuses() -> None:
    for text in _samples():
        html = telegram(text)
        parse_html(html)  # raises EntityError for an unknown tag, an unbalanced one, or a bad entity
        assert _entity_rules_hold(html), (text, html)


def test_slack_output_never_opens_a_token_outside_our_links() -> None:
    # `<` starts every Slack token (<@U…>, <!channel>, <url|text>): only the links we write may have one
    for text in _samples():
        mrkdwn = slack(text)
        outside_links = re.sub(r"<https?://[^<>\s|]+(?:\|[^<>]*)?>", "", mrkdwn)
        assert "<" not in outside_links, (text, mrkdwn)


# --- plain text: rendered without the parser, exactly as the parser would ------------------------------------------


def _plain_candidates() -> list[str]:
    """Short texts of letters, digits, spaces and the punctuation a plain reply has, and a sprinkle of what makes
    Markdown (each such text must go to the parser): a fixed seed, so the same texts every run."""
    rng = random.Random(20261129)
    alphabet = "ab yz09.,?'\"();/é€😀" + "ab " * 6
    special = "!#$%&*+-:<=>@[\\]^_`{}~|\t\r\n\x00"
    texts = ["", "ok", " ok", "ok ", "1. one", "1) one", "12.5 kg", "2024 was a year", "> quoted", "    code"]
    for _ in range(2_000):
        chosen = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24)))
        if rng.random() < 0.3:
            at = rng.randint(0, len(chosen))
            chosen = chosen[:at] + rng.choice(special) + chosen[at:]
        texts.append(chosen)
    return texts


@pytest.mark.parametrize("render", [telegram, slack])
def test_a_plain_line_renders_without_the_parser_exactly_as_the_parser_renders_it(
    render: Callable[[str], str],
) -> None:
    """A line ending is not plain, so `text + "\n"` always goes to the parser; to it, that is the same paragraph."""
    texts = _plain_candidates()
    for text in texts:
        assert render(text) == render(text + "\n"), repr(text)
    shortcut = [text for text in texts if plain(text)]
    assert len(shortcut) > 500  # many took the shortcut: the comparison was not all parser against parser
    assert not any(plain(text) for text in (" ok", "ok ", "1. one", "1) one", "> quoted", "    code", "a\nb"))
