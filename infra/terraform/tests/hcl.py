"""A small reader of the module tree for the tests: every file parsed with python-hcl2 (a real HCL2
parser), modules followed through their calls, and the few expression forms the modules use
resolved to names and logical resources. An unknown form fails loudly, so a new one cannot slip
past unchecked; teach this file to read it.
"""

import re
from pathlib import Path

import hcl2

REF = re.compile(r"\$\{((?:var|local|module|aws_[a-z0-9_]+)\.[\w.\-]+)\}")


def unq(value):
    """python-hcl2 keeps string quotes: '"abc"' -> 'abc'."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def clean(v):
    """Keys and strings unquoted, parser bookkeeping dropped."""
    if isinstance(v, dict):
        return {unq(k): clean(x) for k, x in v.items() if k not in ("__is_block__", "__comments__", "__inline_comments__")}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return unq(v)


_PARSED = {}


def parse(path):
    """One file, parsed once per test run."""
    key = str(Path(path).resolve())
    if key not in _PARSED:
        with open(path) as f:
            _PARSED[key] = hcl2.load(f)
    return _PARSED[key]


class Mod:
    """One module instance: its directory, the call that made it (caller and arguments) and the
    root's variable values (`root_vars`, defaults otherwise)."""

    def __init__(self, path, caller=None, args=None, root_vars=None):
        self.path = Path(path).resolve()
        self.caller = caller
        self.args = clean(args or {})
        self.root_vars = root_vars or {}
        self.files = {p.name: p for p in sorted(self.path.glob("*.tf"))}
        self.parsed = {name: parse(p) for name, p in self.files.items()}
        self.resources, self.locals, self.variables, self.outputs, self.calls = {}, {}, {}, {}, {}
        for doc in self.parsed.values():
            for block in doc.get("resource", []):
                for rtype, named in block.items():
                    for rname, body in named.items():
                        self.resources[(unq(rtype), unq(rname))] = body
            for block in doc.get("locals", []):
                self.locals.update({k: v for k, v in block.items() if not k.startswith("__")})
            for block in doc.get("variable", []):
                self.variables.update({unq(k): v for k, v in block.items()})
            for block in doc.get("output", []):
                self.outputs.update({unq(k): v for k, v in block.items()})
            for block in doc.get("module", []):
                self.calls.update({unq(k): v for k, v in block.items()})

    def __repr__(self):
        return f"Mod({self.path.name})"

    def call(self, name):
        body = self.calls[name]
        return Mod(self.path / unq(body["source"]), caller=self, args=body, root_vars=self.root_vars)

    def root(self):
        return self if self.caller is None else self.caller.root()

    # ---- values -------------------------------------------------------------------------------
    def var(self, name):
        """(scope, expression) of a variable: the caller's argument, else the default."""
        if self.caller is not None and name in self.args:
            return self.caller, self.args[name]
        if self.caller is None and name in self.root_vars:
            return self, self.root_vars[name]
        body = self.variables[name]
        return self, clean(body.get("default"))

    def var_value(self, name):
        """A variable's value (the caller's argument evaluated in the caller, else the default)."""
        scope, e = self.var(name)
        return scope.value(e)

    def value(self, expr):
        """A literal, or a plain reference resolved (variables, simple locals, lookups in a variable's map)."""
        text = unq(expr)
        if not isinstance(text, str):
            return text
        m = re.fullmatch(r"\$\{var\.(\w+)\}", text)
        if m:
            scope, e = self.var(m.group(1))
            return scope.value(e)
        m = re.fullmatch(r'\$\{lookup\(var\.(\w+), "([\w-]+)", null\)\}', text)
        if m:
            scope, e = self.var(m.group(1))
            return (scope.value(e) or {}).get(m.group(2))
        m = re.fullmatch(r'\$\{coalesce\(var\.(\w+), "([\w-]+)"\)\}', text)
        if m:
            scope, e = self.var(m.group(1))
            return scope.value(e) or m.group(2)
        if "${" not in text:
            return text
        return self.text(text)

    def text(self, expr):
        """A string template with every reference to a name substituted (var, local, module output,
        resource `name`), e.g. `${var.prefix}counters` -> `heatsink-counters`."""
        text = unq(expr)

        def sub(m):
            ref = m.group(1)
            parts = ref.split(".")
            if parts[0] == "var":
                scope, e = self.var(parts[1])
                v = scope.value(e)
                for key in parts[2:]:
                    v = scope.value(v[key])
                return str(v)
            if parts[0] == "local":
                return str(self.text(self.locals[parts[1]]))
            if parts[0] == "module":
                mod = self.call(parts[1])
                return str(mod.text(mod.outputs[parts[2]]["value"]))
            if len(parts) == 3 and parts[2] == "name":
                return str(self.text(self.resources[(parts[0], parts[1])]["name"]))
            raise AssertionError(f"{self}: cannot resolve ${{{ref}}} to a name")

        for _ in range(10):
            new = REF.sub(sub, text)
            if new == text:
                break
            text = new
        return text

    def short(self, name, prefix):
        """A deployment's name without its prefix (a user's own table keeps its whole name)."""
        return name[len(prefix) :] if name.startswith(prefix) else name

    # ---- ARNs as logical resources ----------------------------------------------------------------
    def logical(self, expr, prefix):
        """A Resource expression as logical resource names (`table/liked`, `queue/async-failures`,
        `insight-rule/...`), `prefix` stripped from the deployment's names."""
        if isinstance(expr, list):
            return [x for e in expr for x in self.logical(e, prefix)]
        text = unq(expr)
        if text == "*":
            return ["*"]
        m = re.fullmatch(r"\$\{aws_kms_key\.(\w+)\.arn\}", text)
        if m:
            # A key by its alias (alias/<prefix>async-failures -> key/async-failures).
            (alias,) = [b for (t, _), b in self.resources.items() if t == "aws_kms_alias" and unq(b["target_key_id"]) == f"${{aws_kms_key.{m.group(1)}.key_id}}"]
            return ["key/" + self.short(self.text(alias["name"]).removeprefix("alias/"), prefix)]
        m = re.fullmatch(r"\$\{\[for (\w+) in var\.(\w+) : \1\.(\w+)\]\}", text)
        if m:
            # One attribute of each element of a list variable (the directory autopilot's owner
            # tables: `[for t in var.owner_tables : t.arn]`), each resolved in the caller.
            _, var, attr = m.groups()
            scope, e = self.var(var)
            assert isinstance(e, list) and e, f"{self}: var.{var} is not a non-empty list: {e!r}"
            return [x for item in e for x in scope.logical(item[attr], prefix)]
        m = re.fullmatch(r"\$\{var\.(\w+)\}(.*)", text)
        if m:
            scope, e = self.var(m.group(1))
            if isinstance(e, dict):
                raise AssertionError(f"{self}: var.{m.group(1)} is an object")
            return [x + self.text(m.group(2)) for x in scope.logical(e, prefix)]
        m = re.fullmatch(r"\$\{module\.(\w+)\.(\w+)\}(.*)", text)
        if m:
            mod = self.call(m.group(1))
            return [x + self.text(m.group(3)) for x in mod.logical(mod.outputs[m.group(2)]["value"], prefix)]
        m = re.fullmatch(r"\$\{aws_(dynamodb_table|kinesis_stream|sqs_queue)\.(\w+)\.(arn|stream_arn)\}(.*)", text)
        if m:
            kind, rname, attr, rest = m.groups()
            name = self.short(self.text(self.resources[(f"aws_{kind}", rname)]["name"]), prefix)
            base = {"dynamodb_table": "table/", "kinesis_stream": "stream/", "sqs_queue": "queue/"}[kind] + name
            return [base + ("/stream" if attr == "stream_arn" else "") + self.text(rest)]
        m = re.fullmatch(r"\$\{local\.(\w+)\}", text)
        if m and m.group(1) in self.locals:
            return self.logical_local(m.group(1), prefix)
        m = re.fullmatch(r"\$\{local\.async_failures\.(arn|key_arn)\}", text)
        if m:
            # The caller's shared queue, or the block's own (a ../failure-queue call with count).
            scope, e = self.var("async_failures_queue")
            if e is None:
                mod = self.call("own_async_failures")
                return mod.logical(mod.outputs[m.group(1)]["value"], prefix)
            return scope.logical(e[m.group(1)], prefix)
        if text == "${concat(local.watched_arns, local.watched_index_arns)}":
            return self.logical_local("watched_arns", prefix) + self.logical_local("watched_index_arns", prefix)
        raise AssertionError(f"{self}: unexpected Resource expression {text!r}: teach tests/hcl.py to resolve it")

    def logical_local(self, name, prefix):
        text = unq(self.locals[name])
        conditional = re.fullmatch(r'\$\{var\.(\w+) == "([\w-]+)" \? (\S+) : (\S+)\}', text)
        if conditional:
            var, want, yes, no = conditional.groups()
            scope, e = self.var(var)
            return self.logical("${" + (yes if scope.value(e) == want else no) + "}", prefix)
        if name == "watched_arns":
            assert text == "${[for k, t in local.watched : t.arn]}", text
            return [x for t in self.watched().values() for x in self.caller_table(t, "arn", prefix)]
        if name == "watched_index_arns":
            assert text == '${flatten([for k, t in local.watched : [for i in t.indexes : "${t.arn}/index/${i}"]])}', text
            return [
                x + f"/index/{i}" for t in self.watched().values() for x in self.caller_table(t, "arn", prefix) for i in t.get("indexes", [])
            ]
        if name == "managed_rules":
            assert text == (
                '${flatten([for k, t in local.watched : [for kind in ["PKC", "PKT"] : '
                '"${local.insight_rule_arn_prefix}DynamoDBContributorInsights-${kind}-${t.name}-*"]])}'
            ), text
            return [
                f"insight-rule/DynamoDBContributorInsights-{kind}-{self.caller.text(t['name'])}-*"
                for t in self.watched().values()
                for kind in ["PKC", "PKT"]
            ]
        raise AssertionError(f"{self}: unexpected local {name} = {text!r}: teach tests/hcl.py to resolve it")

    # ---- the guard's tables -------------------------------------------------------------------------
    def tables(self):
        """The guard's `tables` argument (evaluated in the caller), keyed as given."""
        scope, e = self.var("tables")
        assert scope is self.caller
        return e

    def watched(self):
        """The guard's tables the controller acts on (hot set); the directory never is."""
        return {k: t for k, t in self.tables().items() if t.get("hot") is not None and self.caller.value(t["hot"]) is not None}

    def caller_table(self, t, attr, prefix):
        return self.caller.logical(t[attr], prefix)

    # ---- IAM statements -----------------------------------------------------------------------------
    def function_statements(self, call):
        """The statements of a `../function` call's role: the function module's own (its log
        streams excepted) and those the call passes, references to locals resolved."""
        body = clean(self.calls[call])
        statements = body["statements"]
        switched = re.fullmatch(r"\$\{concat\(local\.(\w+), var\.(\w+) \? local\.(\w+) : \[\]\)\}", statements) if isinstance(statements, str) else None
        if switched:
            # Statements a bool variable switches on (the autopilot's act switch).
            always, switch, extra = switched.groups()
            on = self.var_value(switch)
            assert isinstance(on, bool), (switch, on)
            statements = clean(self.locals[always]) + (clean(self.locals[extra]) if on else [])
        elif isinstance(statements, str):
            assert statements == "${concat(local.controller_statements, length(local.watched) == 0 ? [] : local.watch_statements)}", statements
            statements = clean(self.locals["controller_statements"]) + (clean(self.locals["watch_statements"]) if self.watched() else [])
        out = []
        for st in statements:
            if isinstance(st, str):
                m = re.fullmatch(r"\$\{local\.(\w+)\[var\.(\w+)\]\}", st)
                assert m, st
                scope, e = self.var(m.group(2))
                st = clean(self.locals[m.group(1)])[scope.value(e)]
            out.append(st)
        fn = self.call(call)
        policy = unq(fn.resources[("aws_iam_role_policy", "this")]["policy"])
        for m in re.finditer(r'\{Effect = "Allow", Action = \[([^\]]*)\], Resource = ("[^"]*"|[\w.\[\]]+)\}', policy.replace("\n", " ")):
            actions = [a.strip().strip('"') for a in m.group(1).split(",")]
            if actions != ["logs:CreateLogStream", "logs:PutLogEvents"]:
                out.append({"Effect": "Allow", "Action": actions, "Resource": unq(m.group(2))})
        return out

    def grants(self, call, prefix):
        """`action logical-resource` strings of one function call's statements."""
        out = set()
        for st in self.function_statements(call):
            assert st["Effect"] == "Allow", st
            assert "Condition" not in st, st
            for res in self.logical(st["Resource"], prefix):
                for action in st["Action"]:
                    out.add(f"{action} {res}")
        return sorted(out)
