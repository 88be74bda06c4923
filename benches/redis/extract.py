"""Writes weir-redis's decision scripts (GCRA, fixed window, sliding window, sliding
log) as plain Lua files, from crates/weir-redis/src/scripts.rs: usage
extract.py SCRIPTS_RS OUT_DIR."""
import re
import sys

src = open(sys.argv[1]).read()


def macro(name):
    return re.search(r"macro_rules! " + name + r' \{\s*\(\) => \{\s*r#"(.*?)"#', src, re.S).group(1)


parts = {"now_prologue!()": macro("now_prologue"), "window_parse!()": macro("window_parse")}
for name in ["GCRA", "FIXED", "SLIDING", "LOG"]:
    body = re.search(
        r"static " + name + r": LazyLock<Script> = LazyLock::new\(\|\| \{\s*Script::new\(concat!\((.*?)\)\)\s*\}\);",
        src,
        re.S,
    ).group(1)
    lua = "".join(
        parts.get(p, p[3:-2]) for p in re.findall(r'now_prologue!\(\)|window_parse!\(\)|r#".*?"#', body, re.S)
    )
    open(f"{sys.argv[2]}/weir-{name.lower()}.lua", "w").write(lua)
