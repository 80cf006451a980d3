#!/usr/bin/env python3
"""Checks the monitoring files of this folder: every PromQL expression of the
Grafana dashboard (grafana/gossamer.json) and of the rule files (rules/*.yml)
is valid and refers to series that exist. Python 3 standard library only.

  check.py static
      Offline: parses the dashboard and the rule files; checks datasources,
      template variables, metric names (against the catalog in README.md,
      every one of which must be used), recording rules referenced, alert
      labels and annotations; with promtool
      on PATH, also checks the syntax of every dashboard query (written to a
      temporary rule file for `promtool check rules`) and that promtool finds
      as many rules as this script does.
  check.py check --url http://HOST:PORT [--timeout S] [--expect EXPR]...
      `static`, then against a running Prometheus that scrapes the rack and
      loads rules/*.yml: every rule is loaded and healthy; every template
      variable's label_values() has values; every expression evaluates
      without error and returns data (see "Alert expressions" below); every
      metric name an expression refers to has series (with --hosts N: from N
      hosts, by their `host` label); each --expect EXPR
      returns samples that are all > 0. Repeats the whole round every 2 s
      until it passes or --timeout seconds have passed; prints the last
      round. Finally, structurally, every `expr` anywhere in the dashboard
      JSON and every rule must be among those the evaluator sent.
  check.py wait-up --url URL --targets N [--samples K] [--timeout S]
      Waits until N targets of job gossamer are up and each was scraped
      successfully at least K times.
  check.py gen-config --target HOST:PORT... [--interval 1s] [--eval-interval 1s]
      Prints a concrete Prometheus configuration generated from
      prometheus.yml: its targets replaced, its intervals set, its rule_files
      made absolute. Printed as JSON, which Prometheus reads as YAML.

Template variables are substituted before evaluation: $host and $app with
the values their label_values() query returns (as a regex alternation, the
way Grafana expands a multi-value variable), $__rate_interval with
--rate-interval (default 1m), $__interval with --interval (default 15s), and
$__range* with --range (default 1h). The static check requires every use of
a dashboard variable to be a regex matcher (label=~"$var").

Alert expressions: an alert expression returns data only while it fires, so
"returns data" cannot be asked of it as a whole. Each alert expression is
evaluated as a whole (it must not fail), and then split into operands: at
the top level, at `and` / `or` / `unless`, then at a comparison; an operand
compared with a number literal (`X > 0.9`, `up == 0`) is evaluated without
that comparison (`X`, `up`), any other operand as it is. Every operand must
return data. The same split is applied to dashboard and recording-rule
expressions, in addition to evaluating them whole, so that `A or B` cannot
hide a B that refers to nothing. What this does not prove: that an alert's
threshold is sensible, or that it would fire.

The YAML files are read by a small parser of the block-YAML subset they are
written in (mappings, sequences, plain and quoted scalars, | and > block
scalars, flow sequences of scalars); when PyYAML is installed, its result
must be identical (so the subset parser is checked wherever PyYAML exists).
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
DS_UID = "${DS_PROMETHEUS}"


class Failure(Exception):
    pass


# ============================================================ YAML subset


class YamlError(Exception):
    pass


_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)$")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


def _strip_comment(s):
    quote = None
    for i, c in enumerate(s):
        if quote:
            if c == quote:
                quote = None
        elif c in "\"'" and (i == 0 or s[i - 1] in " \t[,:"):
            quote = c
        elif c == "#" and (i == 0 or s[i - 1] in " \t"):
            return s[:i].rstrip()
    return s.rstrip()


class MiniYaml:
    """Block YAML: enough for the files in this folder, and loud about the rest."""

    def __init__(self, text, name):
        self.name = name
        self.lines = []  # [indent, text, lineno]; text without the indentation
        self.raw = text.split("\n")
        for n, raw in enumerate(self.raw):
            if "\t" in raw[: len(raw) - len(raw.lstrip())]:
                raise YamlError(f"{name}:{n + 1}: tab in indentation")
            self.lines.append([len(raw) - len(raw.lstrip(" ")), raw.lstrip(" "), n])
        self.i = 0

    def err(self, msg, line=None):
        n = self.lines[self.i][2] + 1 if line is None and self.i < len(self.lines) else (line or 0) + 1
        raise YamlError(f"{self.name}:{n}: {msg} (check.py's YAML subset)")

    def peek(self):
        while self.i < len(self.lines):
            ind, text, _ = self.lines[self.i]
            if text == "" or text.startswith("#") or (text.rstrip() == "---" and ind == 0):
                self.i += 1
                continue
            return ind, text
        return None

    @staticmethod
    def is_item(text):
        return text == "-" or text.startswith("- ")

    def parse(self):
        p = self.peek()
        if p is None:
            return None
        if p[0] != 0:
            self.err("the document must start at column 0")
        v = self.node(0)
        if self.peek() is not None:
            self.err("unexpected content")
        return v

    def node(self, ind):
        p = self.peek()
        if self.is_item(p[1]):
            return self.seq(p[0])
        return self.map(p[0])

    def seq(self, ind):
        out = []
        while True:
            p = self.peek()
            if p is None or p[0] < ind:
                return out
            if p[0] > ind:
                self.err("unexpected indentation")
            if not self.is_item(p[1]):
                return out
            rest = p[1][1:].lstrip(" ")
            if rest == "" or rest.startswith("#"):
                self.i += 1
                q = self.peek()
                out.append(self.node(q[0]) if q and q[0] > ind else None)
                continue
            col = ind + len(p[1]) - len(rest)
            if self.is_item(rest):
                self.err("nested sequence on one line")
            if self.key_of(rest) is not None:
                self.lines[self.i][0], self.lines[self.i][1] = col, rest
                out.append(self.map(col))
            else:
                out.append(self.scalar(_strip_comment(rest)))
                self.i += 1

    def key_of(self, text):
        if text[:1] in "\"'":
            q = text[0]
            end = text.find(q, 1)
            if end > 0 and text[end + 1: end + 2] == ":" and text[end + 2: end + 3] in ("", " "):
                return text[1:end], text[end + 2:]
            return None
        m = re.match(r"([^\s:#\[\]{},&*!|>'\"%@`-][^:#]*?|-[^\s:#][^:#]*?):(\s|$)", text)
        if not m:
            return None
        return m.group(1), text[m.end(1) + 1:]

    def map(self, ind):
        out = {}
        while True:
            p = self.peek()
            if p is None or p[0] < ind:
                return out
            if p[0] > ind:
                self.err("unexpected indentation (a plain scalar over several lines?)")
            if self.is_item(p[1]):
                return out
            kv = self.key_of(p[1])
            if kv is None:
                self.err(f"expected 'key: value', got {p[1]!r}")
            key, rest = kv
            line = self.i
            self.i += 1
            rest = _strip_comment(rest).strip()
            if key in out:
                self.err(f"duplicate key {key!r}", self.lines[line][2])
            if rest == "":
                q = self.peek()
                if q and (q[0] > ind or (q[0] == ind and self.is_item(q[1]))):
                    out[key] = self.node(q[0])
                else:
                    out[key] = None
            elif rest[0] in "|>":
                out[key] = self.block(rest, ind)
            else:
                out[key] = self.scalar(rest)

    def block(self, header, ind):
        m = re.fullmatch(r"([|>])([-+]?)", header)
        if not m:
            self.err(f"unsupported block scalar header {header!r}")
        style, chomp = m.groups()
        body = []
        bind = None
        while self.i < len(self.lines):
            raw = self.raw[self.lines[self.i][2]]
            if raw.strip() == "":
                body.append("")
                self.i += 1
                continue
            cur = len(raw) - len(raw.lstrip(" "))
            if bind is None:
                if cur <= ind:
                    break
                bind = cur
            if cur < bind:
                break
            body.append(raw[bind:])
            self.i += 1
        trailing = 0
        while body and body[-1] == "":
            body.pop()
            trailing += 1
        if style == "|":
            text = "\n".join(body)
        else:
            text, prev_blank = "", True
            for ln in body:
                if ln == "":
                    text += "\n"
                    prev_blank = True
                elif ln.startswith(" "):
                    self.err("more-indented lines in a folded scalar")
                else:
                    text += ("" if prev_blank else " ") + ln
                    prev_blank = False
        if not body:
            return "" if chomp != "+" else "\n" * trailing
        if chomp == "-":
            return text
        if chomp == "+":
            return text + "\n" * (trailing + 1)
        return text + "\n"

    def scalar(self, s):
        s = s.strip()
        if s.startswith('"'):
            m = re.match(r'"((?:[^"\\]|\\.)*)"\s*(#.*)?$', s)
            if not m:
                self.err(f"bad double-quoted scalar {s!r}")
            try:
                return json.loads('"' + m.group(1) + '"')
            except ValueError:
                self.err(f"unsupported escape in {s!r}")
        if s.startswith("'"):
            m = re.match(r"'((?:[^']|'')*)'\s*(#.*)?$", s)
            if not m:
                self.err(f"bad single-quoted scalar {s!r}")
            return m.group(1).replace("''", "'")
        s = _strip_comment(s)
        if s.startswith("["):
            if not s.endswith("]") or "[" in s[1:] or "{" in s:
                self.err(f"only flat flow sequences are supported: {s!r}")
            inner = s[1:-1].strip()
            return [] if inner == "" else [self.scalar(x) for x in inner.split(",")]
        if s.startswith("{"):
            if s.replace(" ", "") == "{}":
                return {}
            self.err(f"flow mappings are not supported: {s!r}")
        if s[:1] in "&*!%@`|>":
            self.err(f"unsupported plain scalar {s!r}")
        if s in ("", "~", "null", "Null", "NULL"):
            return None
        if s in ("true", "True", "TRUE"):
            return True
        if s in ("false", "False", "FALSE"):
            return False
        if _INT.match(s):
            return int(s)
        if _FLOAT.match(s) and any(c.isdigit() for c in s):
            return float(s)
        return s


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    mini = MiniYaml(text, os.path.relpath(path)).parse()
    try:
        import yaml  # noqa: F401  (optional: cross-checks the subset parser)
    except ImportError:
        return mini
    full = yaml.safe_load(text)
    if full != mini:
        raise YamlError(f"{path}: check.py's YAML subset parser reads it differently from PyYAML; "
                        "keep the file in the subset (see the docstring)")
    return full


# ============================================================ PromQL lexing

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
             "and", "or", "unless", "offset", "atan2", "inf", "nan",
             # aggregation operators, which may be followed by `by (...)`
             "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
             "bottomk", "topk", "quantile"}
_LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_COMPARISONS = {"==", "!=", ">", "<", ">=", "<="}
_TOKEN = re.compile(r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<matchers>\{(?:[^{}"'`]|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)*\})
  | (?P<range>\[[^\]]*\])
  | (?P<num>(?:0[xX][0-9a-fA-F]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)(?:[a-zA-Z]+[0-9a-zA-Z]*)*)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>(),@=])
""", re.X)


def lex(expr):
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            raise Failure(f"cannot read PromQL at {expr[pos:pos + 20]!r} in {expr!r}")
        if m.lastgroup != "ws":
            out.append((m.lastgroup, m.group(), m.start(), m.end()))
        pos = m.end()
    return out


def metric_names(expr):
    """Metric names (and recording-rule names) the expression selects."""
    toks = lex(expr)
    names, i = [], 0
    while i < len(toks):
        kind, text = toks[i][0], toks[i][1]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else None
        if kind == "ident" and text.lower() in _LABEL_LIST_KEYWORDS and nxt == "(":
            depth, i = 0, i + 1
            while i < len(toks):  # skip the label list
                depth += {"(": 1, ")": -1}.get(toks[i][1], 0)
                i += 1
                if depth == 0:
                    break
            continue
        if kind == "ident" and nxt != "(" and text.lower() not in _KEYWORDS:
            names.append(text)
        if kind == "matchers" and (i == 0 or toks[i - 1][0] != "ident"):
            raise Failure(f"selector without a metric name ({text}) in {expr!r}: not supported by this check")
        i += 1
    return names


def _split_top(expr, toks, is_sep):
    """Splits at top-level tokens for which is_sep(index) returns the index
    where the right operand starts (or None)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(toks):
        t = toks[i][1]
        if t == "(":
            depth += 1
        elif t == ")":
            depth -= 1
        elif depth == 0:
            j = is_sep(i)
            if j is not None:
                parts.append(expr[start:toks[i][2]])
                start = toks[j][2] if j < len(toks) else len(expr)
                i = j
                continue
        i += 1
    parts.append(expr[start:])
    return [p.strip() for p in parts]


def _skip_modifiers(toks, j, names):
    while j < len(toks) and toks[j][0] == "ident" and toks[j][1].lower() in names:
        j += 1
        if j < len(toks) and toks[j][1] == "(":
            depth = 0
            while j < len(toks):
                depth += {"(": 1, ")": -1}.get(toks[j][1], 0)
                j += 1
                if depth == 0:
                    break
    return j


def operands(expr):
    """The operands that must each return data (see the module docstring)."""
    expr = expr.strip()
    toks = lex(expr)
    if not toks:
        raise Failure("empty expression")
    # Whole expression in parentheses: look inside.
    if toks[0][1] == "(":
        depth = 0
        for k, t in enumerate(toks):
            depth += {"(": 1, ")": -1}.get(t[1], 0)
            if depth == 0:
                break
        if k == len(toks) - 1:
            return operands(expr[toks[0][3]:toks[-1][2]])

    def set_op(i):
        if toks[i][0] == "ident" and toks[i][1].lower() in ("and", "or", "unless"):
            return _skip_modifiers(toks, i + 1, {"on", "ignoring"})
        return None

    parts = _split_top(expr, toks, set_op)
    if len(parts) > 1:
        return [o for p in parts for o in operands(p)]

    def comparison(i):
        if toks[i][0] == "op" and toks[i][1] in _COMPARISONS:
            return _skip_modifiers(toks, i + 1, {"bool", "on", "ignoring", "group_left", "group_right"})
        return None

    parts = _split_top(expr, toks, comparison)
    if len(parts) > 1:
        out = operands(parts[0])
        for p in parts[1:]:
            pt = lex(p)
            if not (len(pt) == 1 and pt[0][0] == "num") and not (
                    len(pt) == 2 and pt[0][1] in "+-" and pt[1][0] == "num"):
                out += operands(p)
        return out
    return [expr]


# ============================================================ the files


def catalog_metrics(root):
    names = set()
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\|\s*`(gossamer_[a-z0-9_]+)`\s*\|", line)
            if m:
                names.add(m.group(1))
    return names


class Query:
    """One PromQL expression, where it came from, and how to check it."""

    def __init__(self, where, expr, kind):
        self.where, self.expr, self.kind = where, expr, kind  # kind: panel, record, alert

    def __repr__(self):
        return f"{self.where}: {self.expr!r}"


def panels_of(dash):
    """Every panel, rows' nested panels included, in order."""
    out = []

    def walk(ps):
        for p in ps or []:
            out.append(p)
            walk(p.get("panels"))
    walk(dash.get("panels"))
    return out


def dashboard_queries(dash):
    qs = []
    for p in panels_of(dash):
        for t in p.get("targets") or []:
            where = f"dashboard panel {p.get('id')} \"{p.get('title')}\" target {t.get('refId')}"
            qs.append(Query(where, t.get("expr"), "panel"))
    return qs


def rule_queries(rule_files):
    qs, rules = [], []
    for path in rule_files:
        doc = load_yaml(path)
        if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
            raise Failure(f"{path}: no 'groups' list")
        for g in doc["groups"]:
            for r in g.get("rules") or []:
                name = r.get("record") or r.get("alert")
                kind = "record" if "record" in r else "alert"
                rules.append((path, g.get("name"), kind, name, r))
                where = f"{os.path.basename(os.path.dirname(path))}/{os.path.basename(path)} {kind} {name}"
                qs.append(Query(where, r.get("expr"), kind))
    return qs, rules


def variables(dash):
    out = []
    for v in (dash.get("templating") or {}).get("list") or []:
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        out.append((v, q))
    return out


_VAR_REF = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)(?::\w+)?\]\]")
_BUILTIN = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s", "__range_ms"}


def var_refs(expr):
    return [a or b or c for a, b, c in _VAR_REF.findall(expr)]


def substitute(expr, values):
    def rep(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in values:
            raise Failure(f"unknown variable ${name} in {expr!r}")
        return values[name]
    return _VAR_REF.sub(rep, expr)


def builtin_values(rate_interval="1m", interval="15s", range_="1h"):
    rng = parse_duration(range_)
    return {"__rate_interval": rate_interval, "__interval": interval,
            "__interval_ms": str(int(parse_duration(interval) * 1000)),
            "__range": range_, "__range_s": str(int(rng)), "__range_ms": str(int(rng * 1000))}


def placeholder_values(var_names):
    """For the offline checks: every dashboard variable matches anything."""
    return {**{n: ".*" for n in var_names}, **builtin_values()}


def parse_duration(s):
    total = 0.0
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    for n, u in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", s):
        total += int(n) * units[u]
    if not re.fullmatch(r"((\d+)(ms|s|m|h|d|w|y))+", s):
        raise Failure(f"bad duration {s!r}")
    return total


def parse_label_values(q):
    m = re.fullmatch(r"\s*label_values\(\s*(.*?)\s*\)\s*", q or "", re.S)
    if not m:
        return None
    inner = m.group(1)
    if "," in inner:
        sel, label = inner.rsplit(",", 1)
        return sel.strip(), label.strip()
    return None, inner.strip()


# ============================================================ static checks


class Report:
    def __init__(self):
        self.failures, self.notes = [], []

    def fail(self, msg):
        self.failures.append(msg)

    def note(self, msg):
        self.notes.append(msg)


def load_all(root):
    with open(os.path.join(root, "grafana", "gossamer.json"), encoding="utf-8") as f:
        dash = json.load(f)
    cfg = load_yaml(os.path.join(root, "prometheus.yml"))
    rule_files = [os.path.join(root, p) if not os.path.isabs(p) else p for p in cfg.get("rule_files") or []]
    if not rule_files:
        raise Failure("prometheus.yml has no rule_files")
    rqs, rules = rule_queries(rule_files)
    return dash, cfg, rule_files, dashboard_queries(dash), rqs, rules


def check_static(root, rep):
    dash, cfg, rule_files, dqs, rqs, rules = load_all(root)
    catalog = catalog_metrics(root)
    if not catalog:
        rep.fail("no metric found in the catalog (README.md)")
    recorded = {name for _, _, kind, name, _ in rules if kind == "record"}
    ds = {"type": "prometheus", "uid": DS_UID}

    # -- dashboard: inputs, datasources, variables
    inputs = dash.get("__inputs") or []
    if not any(i.get("name") == "DS_PROMETHEUS" and i.get("type") == "datasource"
               and i.get("pluginId") == "prometheus" for i in inputs):
        rep.fail("dashboard: no __inputs entry DS_PROMETHEUS (type datasource, pluginId prometheus)")
    if not isinstance(dash.get("schemaVersion"), int) or dash["schemaVersion"] < 36:
        rep.fail(f"dashboard: schemaVersion {dash.get('schemaVersion')!r}")
    ids = [p.get("id") for p in panels_of(dash)]
    if len(ids) != len(set(ids)) or None in ids:
        rep.fail("dashboard: panel ids are missing or not unique")
    for p in panels_of(dash):
        if p.get("type") == "row":
            if p.get("targets"):
                rep.fail(f"dashboard: row {p.get('title')!r} has targets")
            continue
        if p.get("datasource") != ds:
            rep.fail(f"dashboard panel {p.get('id')} {p.get('title')!r}: datasource is {p.get('datasource')!r}, "
                     f"not {ds}")
        if not p.get("targets"):
            rep.fail(f"dashboard panel {p.get('id')} {p.get('title')!r}: no targets")
        for t in p.get("targets") or []:
            if t.get("datasource") != ds:
                rep.fail(f"dashboard panel {p.get('id')} target {t.get('refId')}: "
                         f"datasource is {t.get('datasource')!r}")
    var_names = set()
    for v, q in variables(dash):
        var_names.add(v.get("name"))
        if v.get("datasource") != ds:
            rep.fail(f"dashboard variable {v.get('name')}: datasource is {v.get('datasource')!r}")
        if v.get("type") != "query" or parse_label_values(q) is None:
            rep.fail(f"dashboard variable {v.get('name')}: not a label_values() query variable: {q!r}")
        if not (v.get("multi") and v.get("includeAll")):
            rep.fail(f"dashboard variable {v.get('name')}: not multi-value with 'All'")
    for need in ("host", "app"):
        if need not in var_names:
            rep.fail(f"dashboard: no template variable {need!r}")

    # -- every expression
    for q in dqs + rqs:
        if not isinstance(q.expr, str) or not q.expr.strip():
            rep.fail(f"{q.where}: no PromQL expression")
            continue
        for name in var_refs(q.expr):
            if name in _BUILTIN:
                continue
            if q.kind != "panel" or name not in var_names:
                rep.fail(f"{q.where}: unknown variable ${name}")
        for name in var_names:
            uses = len(re.findall(r"\$\{?%s\b" % re.escape(name), q.expr)) + q.expr.count(f"[[{name}]]")
            if uses != q.expr.count(f'=~"${name}"'):
                rep.fail(f"{q.where}: ${name} used outside a regex matcher (label=~\"${name}\")")
        if re.search(r"\bvector\s*\(|\babsent(_over_time)?\s*\(", q.expr):
            rep.fail(f"{q.where}: vector() or absent() would hide missing series from this check")
        try:
            names = metric_names(substitute(q.expr, placeholder_values(var_names)))
            operands(q.expr)
        except Failure as e:
            rep.fail(f"{q.where}: {e}")
            continue
        if not names:
            rep.fail(f"{q.where}: selects no metric")
        for n in names:
            if ":" in n:
                if n not in recorded:
                    rep.fail(f"{q.where}: {n} is not a recording rule of "
                             f"{', '.join(map(os.path.basename, rule_files))}")
            elif n != "up" and n not in catalog:
                rep.fail(f"{q.where}: metric {n} is not in the catalog (README.md)")
            elif n == "up" and 'job="gossamer"' not in q.expr.replace(" ", ""):
                rep.fail(f"{q.where}: up without job=\"gossamer\"")
    used = set()
    for q in dqs + rqs:
        if isinstance(q.expr, str):
            try:
                used.update(metric_names(substitute(q.expr, placeholder_values(var_names))))
            except Failure:
                pass
    for n in sorted(recorded - used):
        rep.note(f"recording rule {n} is not used by the dashboard or the alerts")
    # The dashboard and the rules cover the catalog, so that `check` (with
    # --hosts) also proves every catalogued metric is exported by every host.
    for n in sorted(catalog - used):
        rep.fail(f"catalog metric {n} (README.md) is used by no dashboard query or rule")

    # -- rules
    for path, group, kind, name, r in rules:
        if kind == "record":
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]*[a-zA-Z0-9_]", name or ""):
                rep.fail(f"{path}: recording rule name {name!r} is not level:metric:operations")
        else:
            sev = (r.get("labels") or {}).get("severity")
            if sev not in ("critical", "warning", "info"):
                rep.fail(f"{path}: alert {name}: severity label {sev!r}")
            ann = r.get("annotations") or {}
            for a in ("summary", "description"):
                if not str(ann.get(a) or "").strip():
                    rep.fail(f"{path}: alert {name}: no {a} annotation")
    for need in ("gossamer:trustee_utilization:ratio_rate1m",):
        if need not in recorded:
            rep.fail(f"no recording rule {need}")
    jobs = [j.get("job_name") for j in cfg.get("scrape_configs") or []]
    if "gossamer" not in jobs:
        rep.fail("prometheus.yml: no job 'gossamer'")

    # -- promtool: syntax of every dashboard query; rule counts
    promtool = shutil.which("promtool")
    if promtool is None:
        rep.note("promtool not found: dashboard query syntax and rule counts not checked offline")
        return dash, dqs, rqs, rules
    total = 0
    for path in rule_files:
        out = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True, timeout=60)
        m = re.search(r"SUCCESS: (\d+) rules found", out.stdout)
        if out.returncode != 0 or not m:
            rep.fail(f"promtool check rules {path}: {out.stdout}{out.stderr}".strip())
        else:
            total += int(m.group(1))
    if total and total != len(rules):
        rep.fail(f"promtool finds {total} rules, check.py parsed {len(rules)}")
    values = placeholder_values(var_names)
    syn = {"groups": [{"name": "dashboard", "rules": []}]}
    index = {}
    for k, q in enumerate(dqs):
        if isinstance(q.expr, str) and q.expr.strip():
            try:
                syn["groups"][0]["rules"].append({"record": f"dashboard:query:{k}",
                                                  "expr": substitute(q.expr, values)})
                index[f"dashboard:query:{k}"] = q
            except Failure as e:
                rep.fail(f"{q.where}: {e}")
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        json.dump(syn, f)
    try:
        out = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            msg = out.stdout + out.stderr
            for rec, q in index.items():  # name the culprits where promtool does
                if re.search(r"\b%s\b" % re.escape(rec), msg):
                    rep.fail(f"{q.where}: promtool: syntax error")
            rep.fail(f"dashboard queries rejected by promtool: {msg.strip()}")
    finally:
        os.unlink(f.name)
    return dash, dqs, rqs, rules


# ============================================================ Prometheus API


class Prom:
    def __init__(self, url):
        self.url = url.rstrip("/")

    def get(self, path, **params):
        qs = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{qs}", timeout=15) as r:
                body = r.read()
        except urllib.error.HTTPError as e:
            body = e.read()
        except (urllib.error.URLError, OSError) as e:
            raise Failure(f"GET {path}: {e}")
        try:
            doc = json.loads(body)
        except ValueError:
            raise Failure(f"GET {path}: not JSON: {body[:200]!r}")
        if doc.get("status") != "success":
            raise Failure(f"{doc.get('errorType', 'error')}: {doc.get('error', body[:200])}")
        return doc["data"]

    def query(self, expr):
        """(number of samples, values) or raises Failure."""
        data = self.get("/api/v1/query", query=expr)
        rt, res = data.get("resultType"), data.get("result")
        if rt == "vector":
            return [float(s["value"][1]) for s in res]
        if rt == "matrix":
            return [float(v[1]) for s in res for v in s["values"]]
        if rt == "scalar":
            return [float(res[1])]
        return [0.0]  # string


def resolve_variables(prom, dash, args, sent):
    values = builtin_values(args.rate_interval, args.interval, args.range)
    problems = []
    for v, q in variables(dash):
        sel, label = parse_label_values(q)
        try:
            params = {}
            if sel:
                params["match[]"] = substitute(sel, values)
            vals = prom.get(f"/api/v1/label/{urllib.parse.quote(label)}/values", **params)
            sent.add(("variable", q))
        except Failure as e:
            problems.append(f"dashboard variable {v['name']}: {q}: {e}")
            values[v["name"]] = ".*"
            continue
        if not vals:
            problems.append(f"dashboard variable {v['name']}: {q} returned no values")
            values[v["name"]] = ".*"
            continue
        # Grafana's expansion of a multi-value variable in a regex matcher; the
        # backslashes doubled for the PromQL string literal.
        values[v["name"]] = "|".join(re.escape(x).replace("\\", "\\\\") for x in vals)
    return values, problems


def check_rules_loaded(prom, rules):
    problems, states = [], []
    try:
        groups = prom.get("/api/v1/rules")["groups"]
    except Failure as e:
        return [f"/api/v1/rules: {e}"], []
    loaded = {}
    for g in groups:
        for r in g.get("rules") or []:
            loaded[(os.path.realpath(g.get("file", "")), g.get("name"), r.get("name"))] = r
    for path, group, kind, name, _ in rules:
        r = loaded.get((os.path.realpath(path), group, name))
        if r is None:
            problems.append(f"rule {name} (group {group}, {path}) is not loaded by Prometheus")
        elif r.get("health") != "ok":
            problems.append(f"rule {name}: health {r.get('health')!r} {r.get('lastError') or ''}".rstrip())
        elif kind == "alert":
            n = len(r.get("alerts") or [])
            states.append(f"{name}: {r.get('state')}" + (f" ({n} alerts)" if n else ""))
    return problems, states


def evaluate_round(prom, dash, dqs, rqs, rules, args, sent):
    """One round; returns (failures, oks, warnings, alert states)."""
    fails, oks, warns = [], [], []
    values, problems = resolve_variables(prom, dash, args, sent)
    fails += problems
    p, states = check_rules_loaded(prom, rules)
    fails += p
    names = set()
    for q in dqs + rqs:
        expr = substitute(q.expr, values) if q.kind == "panel" else q.expr
        sent.add((q.kind, q.expr))
        try:
            whole = prom.query(expr)
        except Failure as e:
            fails.append(f"{q.where}: {e}\n    {expr}")
            continue
        parts = operands(expr)
        checks = [] if q.kind == "alert" else [expr]
        checks += [o for o in parts if o != expr]
        empty = []
        for o in checks:
            try:
                vals = whole if o == expr else prom.query(o)
            except Failure as e:
                empty.append(f"{o}: {e}")
                continue
            if not vals:
                empty.append(f"no data: {o}")
            elif all(math.isnan(v) for v in vals):
                warns.append(f"{q.where}: only NaN: {o}")
        if empty:
            fails.append(f"{q.where}:\n    " + "\n    ".join(empty))
        else:
            oks.append(f"{q.where}" + (f" ({len(whole)} series past the threshold now)" if q.kind == "alert" else ""))
        names.update(metric_names(expr))
    for n in sorted(names):
        try:
            if n == "up" or not args.hosts:
                if not prom.query(f"count({n})"):
                    fails.append(f"no series of {n}")
                continue
            hosts = prom.get("/api/v1/query", query=f"count by (host) ({n})")["result"]
            if len(hosts) < args.hosts:
                fails.append(f"{n}: series from {len(hosts)} host(s) "
                             f"({', '.join(sorted(h['metric'].get('host', '?') for h in hosts)) or 'none'}), "
                             f"want {args.hosts}")
        except Failure as e:
            fails.append(f"count({n}): {e}")
    for e in args.expect or []:
        try:
            vals = prom.query(e)
        except Failure as x:
            fails.append(f"--expect {e}: {x}")
            continue
        if not vals or not all(v > 0 for v in vals):
            fails.append(f"--expect {e}: got {vals or 'no data'}, want samples all > 0")
        else:
            oks.append(f"expected {e} -> {', '.join('%g' % v for v in vals[:6])}")
    return fails, oks, warns, states


def structural_check(dash, rules, sent):
    """Every query in the dashboard JSON (found by walking all of it, not by
    the collector above) and every rule was among those evaluated."""
    fails = []

    def walk(o, path):
        if isinstance(o, dict):
            if "targets" in o:
                for t in o["targets"] or []:
                    if not isinstance(t, dict) or not isinstance(t.get("expr"), str) or not t["expr"].strip():
                        fails.append(f"{path}: a target without a PromQL expr: {t!r}")
            if "expr" in o and ("panel", o["expr"]) not in sent:
                fails.append(f"{path}: expr not evaluated: {o['expr']!r}")
            for k, v in o.items():
                walk(v, f"{path}.{k}")
        elif isinstance(o, list):
            for k, v in enumerate(o):
                walk(v, f"{path}[{k}]")
    walk(dash.get("panels"), "panels")
    for v, q in variables(dash):
        if ("variable", q) not in sent:
            fails.append(f"variable {v.get('name')}: query not evaluated: {q!r}")
    for path, group, kind, name, r in rules:
        if (kind, r.get("expr")) not in sent:
            fails.append(f"{path}: {kind} {name}: not evaluated")
    return fails


# ============================================================ commands


def cmd_static(args):
    rep = Report()
    try:
        check_static(args.root, rep)
    except (Failure, YamlError, ValueError, OSError) as e:
        rep.fail(str(e))
    for n in rep.notes:
        print(f"note: {n}")
    for f in rep.failures:
        print(f"FAIL: {f}")
    if rep.failures:
        print(f"check.py static: {len(rep.failures)} problem(s)")
        return 1
    print("ok: static checks of the dashboard, the rules and prometheus.yml")
    return 0


def cmd_check(args):
    if cmd_static(args) != 0:
        return 1
    dash, cfg, rule_files, dqs, rqs, rules = load_all(args.root)
    prom = Prom(args.url)
    deadline = time.monotonic() + args.timeout
    rounds = 0
    while True:
        rounds += 1
        sent = set()
        try:
            fails, oks, warns, states = evaluate_round(prom, dash, dqs, rqs, rules, args, sent)
        except Failure as e:
            fails, oks, warns, states = [str(e)], [], [], []
        if not fails or time.monotonic() + 2 > deadline:
            break
        time.sleep(2)
    n_panel = sum(1 for q in dqs)
    n_rule = len(rqs)
    if args.verbose:
        for o in oks:
            print(f"ok: {o}")
    for w in warns:
        print(f"warning: {w}")
    for s in states:
        print(f"alert state: {s}")
    structural = structural_check(dash, rules, sent)
    for f in fails + structural:
        print(f"FAIL: {f}")
    if fails or structural:
        print(f"check.py: {len(fails) + len(structural)} problem(s) after {rounds} round(s) "
              f"({n_panel} dashboard queries, {n_rule} rules)")
        return 1
    print(f"ok: all {n_panel} dashboard queries and {n_rule} rule expressions evaluate and return data "
          f"({len(oks)} checks, round {rounds}); every dashboard query and rule was evaluated")
    return 0


def cmd_wait_up(args):
    prom = Prom(args.url)
    deadline = time.monotonic() + args.timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            data = prom.get("/api/v1/query", query='sum_over_time(up{job="gossamer"}[10m])')
            up = prom.get("/api/v1/query", query='up{job="gossamer"}')
            ups = {s["metric"]["instance"]: float(s["value"][1]) for s in up["result"]}
            counts = {s["metric"]["instance"]: float(s["value"][1]) for s in data["result"]}
            good = [i for i, v in ups.items() if v == 1 and counts.get(i, 0) >= args.samples]
            last = f"up: {ups}, successful scrapes: {counts}"
            if len(good) >= args.targets:
                print(f"ok: {len(good)} targets of job gossamer up, each scraped at least {args.samples} times "
                      f"({last})")
                return 0
        except Failure as e:
            last = str(e)
        time.sleep(0.5)
    try:
        for t in prom.get("/api/v1/targets")["activeTargets"]:
            last += f"\n    target {t.get('scrapeUrl')}: {t.get('health')} {t.get('lastError')}"
    except Failure as e:
        last += f"\n    /api/v1/targets: {e}"
    print(f"FAIL: fewer than {args.targets} targets of job gossamer up after {args.timeout}s: {last}")
    return 1


def cmd_gen_config(args):
    cfg = load_yaml(os.path.join(args.root, "prometheus.yml"))
    g = cfg.setdefault("global", {})
    g["scrape_interval"] = args.interval
    g["evaluation_interval"] = args.eval_interval
    if parse_duration(g.get("scrape_timeout", args.interval)) > parse_duration(args.interval):
        g["scrape_timeout"] = args.interval
    cfg["rule_files"] = [p if os.path.isabs(p) else os.path.join(args.root, p) for p in cfg.get("rule_files") or []]
    jobs = [j for j in cfg.get("scrape_configs") or [] if j.get("job_name") == "gossamer"]
    if len(jobs) != 1:
        raise Failure("prometheus.yml: expected exactly one job 'gossamer'")
    jobs[0]["static_configs"] = [{"targets": args.target}]
    json.dump(cfg, sys.stdout, indent=2)
    print()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=HERE, help="the monitoring folder (default: this script's)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("static")
    c = sub.add_parser("check")
    c.add_argument("--url", required=True)
    c.add_argument("--timeout", type=float, default=30)
    c.add_argument("--rate-interval", default="1m")
    c.add_argument("--interval", default="15s")
    c.add_argument("--range", default="1h")
    c.add_argument("--expect", action="append", metavar="EXPR")
    c.add_argument("--hosts", type=int, default=0,
                   help="every metric referred to must have series from this many hosts (label host)")
    c.add_argument("-v", "--verbose", action="store_true")
    w = sub.add_parser("wait-up")
    w.add_argument("--url", required=True)
    w.add_argument("--targets", type=int, required=True)
    w.add_argument("--samples", type=int, default=3)
    w.add_argument("--timeout", type=float, default=30)
    gc = sub.add_parser("gen-config")
    gc.add_argument("--target", action="append", required=True, metavar="HOST:PORT")
    gc.add_argument("--interval", default="1s")
    gc.add_argument("--eval-interval", default="1s")
    args = ap.parse_args()
    try:
        return {"static": cmd_static, "check": cmd_check, "wait-up": cmd_wait_up,
                "gen-config": cmd_gen_config}[args.cmd](args)
    except (Failure, YamlError) as e:
        print(f"FAIL: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
