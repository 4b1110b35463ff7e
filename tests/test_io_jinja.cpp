// The Jinja engine behind chat templates: jinja2's whitespace rules under Hugging
// Face's settings, its scoping, Python's values and operators, the filters, tests and
// methods templates use, and clear errors (template line, what was undefined) instead
// of wrong text. Each expectation is what Python's jinja2 3.1 renders.
#include <gtest/gtest.h>

#include <string>

#include "src/io/jinja/template.h"

namespace tiergen::io::jinja {
namespace {

std::string render(const std::string& source, const Dict& variables = {}) {
  return Template(source, "t").render(variables);
}

std::string error_of_render(const std::string& source, const Dict& variables = {}) {
  try {
    render(source, variables);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

Value messages() {
  return Value::list({Value::dict({{"role", Value::string("system")}, {"content", Value::string("S")}}),
                      Value::dict({{"role", Value::string("user")}, {"content", Value::string(" u1 ")}}),
                      Value::dict({{"role", Value::string("assistant")}, {"content", Value::string("a1")}})});
}

TEST(Jinja, WhitespaceFollowsTrimBlocksAndLstripBlocks) {
  EXPECT_EQ(render("  {% if true %}\nA\n  {% endif %}\nB\n"), "A\nB");
  EXPECT_EQ(render("x  {% if true %}y{% endif %}"), "x  y") << "lstrip only from a line's start";
  EXPECT_EQ(render("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
  EXPECT_EQ(render("a  \n {{- ' x ' -}} \n b"), "a x b");
  EXPECT_EQ(render("a {#- note -#}\n b{# c #}\nd"), "abd");
  EXPECT_EQ(render("{{ 1 }}\n{{ 2 }}"), "1\n2") << "trim_blocks leaves expressions alone";
  EXPECT_EQ(render("{% raw %}{{ not parsed }}{% endraw %}"), "{{ not parsed }}");
}

TEST(Jinja, TagsEndOutsideBracketsAndNewlinesAreNormalised) {
  EXPECT_EQ(render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");
  EXPECT_EQ(render("{% if true %}\r\nx{% endif %}\r\ny\r\nz\r\n"), "xy\nz") << "CRLF reads as \\n";
  EXPECT_EQ(render("a\n  {% if true +%}\n  b{% endif %}"), "a\n\n  b") << "+%} keeps the newline";
  EXPECT_EQ(render("{% raw %}\nX{% endraw %}"), "\nX");
  EXPECT_EQ(render("a\n    {% raw %}X\n    {% endraw %}\nb"), "a\nX\nb");
}

TEST(Jinja, SetInALoopStaysInTheLoopButANamespaceCarriesOut) {
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% set x = 1 %}{% for i in [1, 2, 3] %}{% set x = x + i %}"
                   "{% set ns.n = ns.n + i %}{% endfor %}{{ x }} {{ ns.n }}"),
            "1 6");
  EXPECT_NE(error_of_render("{% set d = {} %}{% set d.k = 1 %}").find("only a namespace()"), std::string::npos);
}

TEST(Jinja, LoopsFilterCountBreakAndFallBack) {
  const Dict v = {{"messages", messages()}};
  EXPECT_EQ(render("{% for m in messages %}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.revindex0 }} "
                   "{% endfor %}", v),
            "1TrueFalse2 2FalseFalse1 3FalseTrue0 ");
  EXPECT_EQ(render("{% for m in messages if m.role != 'system' %}{{ loop.index0 }}/{{ loop.length }}:{{ m.role }}"
                   "{% if not loop.first %}<{{ loop.previtem.role }}{% endif %} {% endfor %}", v),
            "0/2:user 1/2:assistant<user ");
  EXPECT_EQ(render("{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i > 3 %}{% break %}{% endif %}"
                   "{{ i }}{% endfor %}"),
            "023");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(render("{% for c in 'hé' %}[{{ c }}]{% endfor %}"), "[h][é]");
}

TEST(Jinja, ValuesPrintAndCompareAsPython) {
  EXPECT_EQ(render("{{ true }} {{ none }} {{ 1 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2.0 }} {{ 2 ** 10 }}"),
            "True None 0.5 3 -4 2 2.0 1024");
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ true == 1 }} {{ '' != false }} {{ [1, 'a'] == [1, 'a'] }} {{ 'b' > 'a' }}"),
            "True True True True True");
  EXPECT_EQ(render("{{ [1, 'a', none, true] }} {{ {'k': \"it's\"} }}"), "[1, 'a', None, True] {'k': \"it's\"}");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }} {{ [1] + [2] }}"), "a1None abab [1, 2]");
  EXPECT_EQ(render("{{ 'yes' if 0 else 'no' }} {{ 0 or 'x' }} {{ 1 and 'y' }} {{ not [] }}"), "no x y True");
  EXPECT_EQ(render("{{ 'a' in 'cat' }} {{ 'k' in {'k': 1} }} {{ 3 not in [1, 2] }}"), "True True True");
  EXPECT_EQ(render("{{ '\\u00e9\\n' | length }}"), "2");
  EXPECT_EQ(render("{{ 3 > 2 > 1 }} {{ 1 < 3 < 2 }} {{ 1 == 1 in [true] }}"), "True False True") << "chained";
  EXPECT_EQ(render("{{ 2.5 | round }} {{ 3 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(0, 'ceil') }}"),
            "2.0 3 2.67 3.0");
  EXPECT_NE(error_of_render("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of_render("{{ (-9223372036854775807 - 1) // -1 }}").find("integer overflow"), std::string::npos);
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ [1, 2, 3][1::9223372036854775807] }}"), "4611686018427387904 [2]");
  EXPECT_EQ(render("{{ range(9223372036854775806, 9223372036854775807, 10) | list }} {{ -3 | abs }} {{ 2.7 | int }}"),
            "[9223372036854775806] 3 2");
  EXPECT_NE(error_of_render("{{ 1e30 | int }}").find("past the 64-bit integers"), std::string::npos);
  EXPECT_NE(error_of_render("{{ '99999999999999999999' | int }}").find("past the 64-bit integers"), std::string::npos);
  EXPECT_NE(error_of_render("{{ 99999999999999999999 }}").find("past 64 bits"), std::string::npos);
}

TEST(Jinja, TextIsUnicodeAsInPython) {
  EXPECT_EQ(render("[{{ '\\u3000x\\u00a0' | trim }}]{{ 'a\\u2003b'.split() }}"), "[x]['a', 'b']");
  EXPECT_EQ(render("{{ 'héllo' | upper }} {{ 'ÉCOLE' | lower }} {{ 'straße' | upper }} {{ 'élan vital' | title }}"),
            "HÉLLO école STRASSE Élan Vital");
  EXPECT_EQ(render("{{ 'ωμεγα' | upper }}{{ 'ПРИВЕТ' | lower }}"), "ΩΜΕΓΑпривет");
}

TEST(Jinja, UndefinedPrintsEmptyButCannotBeUsed) {
  EXPECT_EQ(render("[{{ missing }}]{{ missing is defined }}{{ missing is none }}{{ missing | default('d') }}"),
            "[]FalseFalsed");
  EXPECT_EQ(render("{% for x in missing %}x{% endfor %}{{ missing | length }}"), "0");
  const Dict v = {{"m", Value::dict({{"role", Value::string("user")}})}};
  EXPECT_EQ(render("{{ m.content is defined }}{{ m.tool_calls is not none }}", v), "FalseTrue");
  const std::string e = error_of_render("line one\n{{ missing.attribute }}");
  EXPECT_NE(e.find("t line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("'missing' is undefined"), std::string::npos) << e;
  EXPECT_NE(error_of_render("{{ 'a' + missing }}").find("'missing' is undefined"), std::string::npos);
  EXPECT_NE(error_of_render("{{ 'a' + 1 }}").find("'str' and 'int'"), std::string::npos);
}

TEST(Jinja, FiltersDoWhatJinjaDoes) {
  const Dict v = {{"messages", messages()}};
  EXPECT_EQ(render("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('|') }}", v),
            " u1 ");
  EXPECT_EQ(render("{{ messages | rejectattr('role', 'in', ['system', 'user']) | list | length }}", v), "1");
  EXPECT_EQ(render("{{ messages[0] | tojson }}", v), "{\"role\": \"system\", \"content\": \"S\"}");
  EXPECT_EQ(render("{{ {'a': [1, 2.5, none], 'é': true} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    2.5,\n    null\n  ],\n  \"é\": true\n}");
  EXPECT_EQ(render("{{ ' x ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}|{{ 'hi there' | title }}"),
            "x|a|ABab|Hi There");
  EXPECT_EQ(render("{{ [3, 1, 2] | sort | join(',') }} {{ ['b', 'A', 'a'] | unique | list }} {{ [1, 2] | reverse | list }}"),
            "1,2,3 ['b', 'A'] [2, 1]");
  EXPECT_EQ(render("{% for k, v in {'b': 1, 'a': 2} | dictsort %}{{ k }}{{ v }}{% endfor %} {{ [1, 2, 3] | first }}"
                   "{{ [1, 2, 3] | last }} {{ [1, 2] | sum }}"),
            "a2b1 13 3");
  EXPECT_EQ(render("{{ '3' | int + 1 }} {{ 'x' | int }} {{ 2 | float }} {{ 'a-b' | replace('-', '+') }} {{ 1 | string }}"),
            "4 0 2.0 a+b 1");
  EXPECT_EQ(render("{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ none | default('x', true) }}"), "a\n  b\n\n  c|x");
  EXPECT_EQ(render("[{{ '\\nx' | indent(2, true) }}]"), "[  \n  x]");
  EXPECT_EQ(render("{{ {'b': 1, 'a': {'d': 'é', 'c': 2}} | tojson(sort_keys=true) }}"),
            "{\"a\": {\"c\": 2, \"d\": \"é\"}, \"b\": 1}");
  EXPECT_EQ(render("{{ ['é', 1] | tojson(true) }} {{ [1, 2] | tojson(separators=(',', ':')) }} {{ [1] | tojson(indent=-1) }}"),
            "[\"\\u00e9\", 1] [1,2] [\n1\n]") << "HF's tojson: ensure_ascii first";
  EXPECT_NE(error_of_render("{{ 1 | nosuchfilter }}").find("no filter named 'nosuchfilter'"), std::string::npos);
}

TEST(Jinja, SlicesMethodsAndTests) {
  const Dict v = {{"messages", messages()}};
  EXPECT_EQ(render("{{ messages[1:] | length }} {{ messages[-1].role }} {{ messages[::-1][0].role }} {{ 'héllo'[1:3] }}",
                   v),
            "2 assistant assistant él");
  EXPECT_EQ(render("{{ messages[9] is defined }}", v), "False");
  EXPECT_EQ(render("{{ ' a b '.strip() }}|{{ 'a,b'.split(',') }}|{{ ' x  y '.split() }}|{{ 'abc'.startswith(('x', 'a')) }}"),
            "a b|['a', 'b']|['x', 'y']|True");
  EXPECT_EQ(render("{{ {'k': 1}.get('k') }}{{ {'k': 1}.get('z', 'd') }}{{ {'k': 1}.keys() | list }}"), "1d['k']");
  EXPECT_EQ(render("{{ 'x' is string }}{{ 1 is number }}{{ {} is mapping }}{{ 3 is odd }}{{ 4 is divisibleby 2 }}"
                   "{{ none is none }}{{ 1 is sameas true }}"),
            "TrueTrueTrueTrueTrueTrueFalse");
}

TEST(Jinja, MacrosTakeArgumentsAndDefaults) {
  EXPECT_EQ(render("{% macro tag(name, body='-') %}<{{ name }}>{{ body }}{% endmacro %}{{ tag('a') }}{{ tag('b', body='x') }}"),
            "<a>-<b>x");
  EXPECT_EQ(render("{% for i in range(2) %}{% macro g() %}{{ i }}{% endmacro %}{{ g() }}{% endfor %}"), "01")
      << "a macro sees the names where it was defined";
  EXPECT_EQ(render("{% macro down(n) %}{{ n }}{% if n > 0 %}{{ down(n - 1) }}{% endif %}{% endmacro %}{{ down(3) }}"),
            "3210");
  EXPECT_NE(error_of_render("{% macro f(a) %}{% endmacro %}{{ f(b=1) }}").find("no parameter 'b'"), std::string::npos);
}

TEST(Jinja, UnpackingInSetAndFor) {
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% for (k, v) in [['x', 3]] %}{{ k }}{{ v }}{% endfor %}"),
            "12x3");
}

TEST(Jinja, RaiseExceptionCarriesTheTemplatesMessage) {
  try {
    render("{{ raise_exception('Only user and assistant roles are supported!') }}");
    FAIL() << "raise_exception must throw";
  } catch (const TemplateRaised& e) {
    EXPECT_STREQ(e.what(), "Only user and assistant roles are supported!");
  }
}

TEST(Jinja, SyntaxErrorsNameTheLine) {
  EXPECT_NE(error_of_render("a\nb\n{% if x %}").find("t line 3: expected {% endif %}"), std::string::npos)
      << error_of_render("a\nb\n{% if x %}");
  EXPECT_NE(error_of_render("{{ 'open }}").find("a string is never closed"), std::string::npos);
  EXPECT_NE(error_of_render("{% frobnicate %}").find("unknown tag 'frobnicate'"), std::string::npos);
  EXPECT_NE(error_of_render("{{ 1 + }}").find("expected a value"), std::string::npos);
  EXPECT_NE(error_of_render("{{ (1 + }}").find("never closed"), std::string::npos) << "}} inside brackets is no end";
  EXPECT_NE(error_of_render("{% break %}").find("outside a for loop"), std::string::npos);
  EXPECT_NE(error_of_render("{{ a $ b }}").find("unexpected character '$'"), std::string::npos);
}

TEST(Jinja, ATemplateCannotExhaustTheHost) {
  EXPECT_NE(error_of_render("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}").find("nests deeper"), std::string::npos);
  std::string nested;
  for (int i = 0; i < 300; ++i) nested += "{% if true %}";
  EXPECT_NE(error_of_render(nested).find("nests deeper"), std::string::npos);
  EXPECT_NE(error_of_render("{{ range(100000000) | length }}").find("range() of more than"), std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 10000; ++i) chain += "+1";
  EXPECT_NE(error_of_render(chain + " }}").find("nests deeper"), std::string::npos);
  std::string conditional = "{{ 1";
  for (int i = 0; i < 10000; ++i) conditional += " if 1 else 1";
  EXPECT_NE(error_of_render(conditional + " }}").find("nests deeper"), std::string::npos);
  EXPECT_NE(error_of_render("{% set ns = namespace() %}{% set ns.me = ns %}").find("cannot hold a namespace"),
            std::string::npos);
  EXPECT_NE(error_of_render("{% set ns = namespace(x=1) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}")
                .find("nested more than"),
            std::string::npos);
  EXPECT_EQ(render("{{ ('' * 1000000000000000000) | length }}"), "0");
  EXPECT_NE(error_of_render("{{ 'a' | indent(100000000000) }}").find("MiB"), std::string::npos);
  EXPECT_NO_THROW(render("{{ [[1]] | map(attribute='99999999999999999999') | list }}"));
  EXPECT_NE(error_of_render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("nests deeper than"),
            std::string::npos);
  const std::string doubling = error_of_render(
      "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}");
  EXPECT_TRUE(doubling.find("more than 64 MiB") != std::string::npos || doubling.find("steps") != std::string::npos)
      << doubling;
  EXPECT_NE(error_of_render("{{ ([1] * 1000) * 1000000 }}").find("more than"), std::string::npos);
  EXPECT_NE(error_of_render("{% set big = range(1000000) | list %}{% for i in big %}{{ i in big }}{% endfor %}")
                .find("steps"),
            std::string::npos);
}

}  // namespace
}  // namespace tiergen::io::jinja
