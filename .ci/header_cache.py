# The result cache of .ci/lint's header check: a header that compiled on its own is not compiled
# again while nothing that compile reads has changed, so a fresh clone of an unchanged tree
# re-checks no header. One empty file per key in the cache folder; only successes are stored (a
# failing header is compiled, and reported, on every run). Tested by tests/lint/test_lint.py.
# Leaves out: files the compile reads outside the repository other than under the compiler's
# include folders and the command's -isystem folders (it reads none), and sharing between
# machines (keys hold file times of the system headers).
#
#   LOOM_LINT_CACHE=DIR   the cache folder (default ${XDG_CACHE_HOME:-~/.cache}/loom/lint-headers)
#   LOOM_LINT_CACHE=off   no cache: every header is compiled
import hashlib
import os
import re
import subprocess
import time

# Note [The header cache's key]
# The key of one header's check is the SHA-256 of everything its compile reads or is told:
# - the compiler: its path on PATH, that path resolved, and its --version output;
# - the compile command with the tree's root written <root> (so a clone at another path shares
#   the keys), the text it reads on stdin, and the environment variables that add include folders;
# - the system headers: path, size and modification time of every file under the compiler's own
#   include folders (its `-E -v` search list) and the command's -isystem folders, so an upgrade
#   of libstdc++, Eigen, CUDA or libtorch misses;
# - the repository files it reads: the header and every file it includes, transitively, each by
#   its path in the tree and the hash of its content. An include is resolved as the compile
#   resolves it: "x" against the including file's folder (stdin's is the root: the compile runs
#   there), then the -I folders in order; <x> against the -I folders; one that names no file of
#   the tree is a system header (above). Every #include line counts, whether or not an #if around
#   it is taken: a header is re-checked when a file it might include changes. A header that
#   reaches an include the scan cannot follow (a macro, #include_next, __has_include) is not
#   cached.
KEY_VERSION = "loom-lint-headers-1"
INCLUDE_ENV = ("CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH")
ANY_INCLUDE = re.compile(r"^\s*#\s*include\w*\b[^\n]*", re.M)
PLAIN_INCLUDE = re.compile(r'#\s*include\s*(?:"([^"]+)"|<([^>]+)>)')
UNUSED_DAYS = 30  # entries not hit for this long are removed


def folder():
    """The cache folder, or None when LOOM_LINT_CACHE=off."""
    env = os.environ.get("LOOM_LINT_CACHE", "")
    if env == "off":
        return None
    if env:
        return os.path.abspath(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "loom", "lint-headers")


def sha(data):
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()


def options_of(cmd, flag):
    return [cmd[i + 1] for i in range(len(cmd) - 1) if cmd[i] == flag]


class HeaderCache:
    def __init__(self, root, cxx_path, path):
        self.root, self.cxx_path, self.path = root, cxx_path, path
        r = subprocess.run([cxx_path, "--version"], capture_output=True, text=True)
        self.compiler = "\n".join([cxx_path, os.path.realpath(cxx_path), r.stdout, r.stderr])
        self.env = "\n".join(f"{v}={os.environ.get(v, '')}" for v in INCLUDE_ENV)
        self.scans, self.folders, self.systems = {}, {}, {}

    def system_print(self, cmd):
        """The folder prints of the compiler's include search list for this command (its `-E -v`
        output) and the command's -isystem folders, less the folders of the tree (once a run)."""
        if tuple(cmd) not in self.systems:
            probe = [self.cxx_path] + [("-E" if c == "-fsyntax-only" else c) for c in cmd[1:]] + ["-v"]
            r = subprocess.run(probe, input="", capture_output=True, text=True, cwd=self.root)
            listed, inside = [], False
            for line in r.stderr.splitlines():  # the folders between "... search starts here:"
                if line.startswith("End of search list"):  # and "End of search list."
                    break
                inside = inside or "search starts here" in line
                if inside and line.startswith(" /"):
                    listed.append(line.strip().split(" (")[0])
            system = sorted({os.path.realpath(d) for d in listed + options_of(cmd, "-isystem")})
            tree = os.path.realpath(self.root)
            system = [d for d in system if d != tree and not d.startswith(tree + os.sep)]
            # A folder's print covers the folders under it.
            system = [d for d in system if not any(d.startswith(a + os.sep) for a in system)]
            self.systems[tuple(cmd)] = "\n".join(f"{d} {self.folder_print(d)}" for d in system)
        return self.systems[tuple(cmd)]

    def folder_print(self, d):
        """Path, size and modification time of every file under d, hashed (once a run)."""
        if d not in self.folders:
            h = hashlib.sha256(d.encode())
            for dirpath, dirs, files in os.walk(d):
                dirs.sort()
                for f in sorted(files):
                    p = os.path.join(dirpath, f)
                    try:
                        st = os.stat(p)
                    except OSError:
                        continue
                    h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
            self.folders[d] = h.hexdigest()
        return self.folders[d]

    def in_tree(self, path):
        """path relative to the root when it is a file of the tree, else None."""
        if not os.path.isfile(path):
            return None
        rel = os.path.relpath(os.path.realpath(path), os.path.realpath(self.root))
        return None if rel.startswith("..") else rel

    def scan(self, rel):
        """(content hash, includes as (quoted, name)), or None for an include it cannot follow."""
        if rel not in self.scans:
            with open(os.path.join(self.root, rel), "rb") as f:
                data = f.read()
            text = data.decode("utf-8", errors="replace")
            incs = []
            for line in ANY_INCLUDE.findall(text):
                m = PLAIN_INCLUDE.match(line.strip())
                if not m:  # #include MACRO, #include_next
                    incs = None
                    break
                incs.append((m.group(1) is not None, m.group(1) or m.group(2)))
            if "__has_include" in text:
                incs = None
            self.scans[rel] = None if incs is None else (sha(data), incs)
        return self.scans[rel]

    def resolve(self, including_dir, quoted, name, search):
        for d in ([including_dir] if quoted else []) + search:
            p = os.path.normpath(os.path.join(d, name))
            if os.path.isfile(p):
                return self.in_tree(p)  # a file outside the tree is a system header
        return None

    def tree_files(self, header, search):
        """{path in the tree: content hash} of the header and what it includes, or None."""
        seen, todo = {}, [header]
        while todo:
            rel = todo.pop()
            if rel in seen:
                continue
            scanned = self.scan(rel)
            if scanned is None:
                return None
            seen[rel] = scanned[0]
            here = os.path.dirname(os.path.join(self.root, rel))
            for quoted, name in scanned[1]:
                found = self.resolve(here, quoted, name, search)
                if found is not None:
                    todo.append(found)
        return seen

    def key(self, header, cmd, stdin):
        """The key of compiling stdin (which includes header) with cmd, or None (not cached)."""
        search = [os.path.join(self.root, d) for d in options_of(cmd, "-I")]
        files = self.tree_files(header, search)
        if files is None:
            return None
        parts = [KEY_VERSION, self.compiler, self.env, self.system_print(cmd), stdin,
                 "\0".join(c.replace(self.root, "<root>") for c in cmd)]
        parts += [f"{rel}\0{h}" for rel, h in sorted(files.items())]
        return sha("\n\0\n".join(parts))

    def hit(self, key):
        p = os.path.join(self.path, key)
        if not os.path.exists(p):
            return False
        try:
            os.utime(p)  # a hit keeps the entry from being pruned
        except OSError:
            pass
        return True

    def store(self, key):
        try:
            with open(os.path.join(self.path, key), "a"):
                pass
        except OSError:
            pass

    def prune(self):
        """Removes the entries no run has hit or stored for UNUSED_DAYS days."""
        old = time.time() - UNUSED_DAYS * 86400
        for e in os.scandir(self.path):
            try:
                if e.is_file() and e.stat().st_mtime < old:
                    os.remove(e.path)
            except OSError:
                pass


def open_cache(root, cxx_path):
    """The cache for this run, or None (off, or its folder cannot be made)."""
    path = folder()
    if path is None:
        return None
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        print(f"lint: headers: no result cache ({e})")
        return None
    return HeaderCache(os.path.abspath(root), cxx_path, path)
