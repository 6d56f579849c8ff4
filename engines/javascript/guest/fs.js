// Session-only `fs` and `process.cwd()/chdir()` over the wasi:filesystem preopen of
// /workspace (spec 7.4, 7.8). Paths are normalized against the guest cwd; anything that
// normalizes outside /workspace is EACCES. Symlinks leaving the preopen are refused by the
// host (wasmtime's capability-based filesystem), which we report as EPERM/EACCES.
// Operations without a value return null, as the reference's host-side fs does.
import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';

export const WORKSPACE = '/workspace';
const CHUNK = 65536n;
const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8');

const DESCRIPTIONS = {
  ENOENT: 'no such file or directory',
  EEXIST: 'file already exists',
  EISDIR: 'illegal operation on a directory',
  ENOTDIR: 'not a directory',
  ENOTEMPTY: 'directory not empty',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  EINVAL: 'invalid argument',
  EBUSY: 'resource busy or locked',
  ENAMETOOLONG: 'name too long',
  ELOOP: 'too many symbolic links encountered',
  ENOSPC: 'no space left on device',
  EFBIG: 'file too large',
  EIO: 'i/o error',
};

const WASI_CODES = {
  'no-entry': 'ENOENT',
  exist: 'EEXIST',
  'is-directory': 'EISDIR',
  'not-directory': 'ENOTDIR',
  'not-empty': 'ENOTEMPTY',
  access: 'EACCES',
  'not-permitted': 'EPERM',
  invalid: 'EINVAL',
  busy: 'EBUSY',
  'name-too-long': 'ENAMETOOLONG',
  loop: 'ELOOP',
  'insufficient-space': 'ENOSPC',
  'file-too-large': 'EFBIG',
  'read-only': 'EPERM',
};

/** A Node-style error: `ENOENT: no such file or directory, open '/workspace/x'`. */
function nodeError(code, syscall, path, dest) {
  const description = DESCRIPTIONS[code] || 'i/o error';
  let message = `${code}: ${description}, ${syscall} '${path}'`;
  if (dest !== undefined) message += ` -> '${dest}'`;
  const error = new Error(message);
  error.code = code;
  error.syscall = syscall;
  error.path = path;
  if (dest !== undefined) error.dest = dest;
  return error;
}

/** The wasi error-code string carried by a failed import call, or null. */
function wasiCode(error) {
  if (typeof error === 'string') return error;
  if (error && typeof error.payload === 'string') return error.payload;
  return null;
}

function dispose(resource) {
  if (resource && typeof resource[Symbol.dispose] === 'function') resource[Symbol.dispose]();
}

let root = null;
let cwd = WORKSPACE;

function workspaceRoot(syscall, path) {
  if (root === null) {
    for (const [descriptor, guestPath] of getDirectories()) {
      if (guestPath === WORKSPACE) root = descriptor;
    }
  }
  if (root === null) throw nodeError('ENOENT', syscall, path);
  return root;
}

/** Absolute, normalized guest path of `path` relative to the current directory. */
/** `path` made absolute against `base` (spec 6.2), or null when a `..` has nothing to pop
 * (the path escapes, even if it would come back: `/../workspace`). */
export function normalize(path, base = cwd) {
  const absolute = path.startsWith('/') ? path : `${base}/${path}`;
  const parts = [];
  for (const segment of absolute.split('/')) {
    if (segment === '' || segment === '.') continue;
    if (segment !== '..') parts.push(segment);
    else if (parts.length) parts.pop();
    else return null;
  }
  return `/${parts.join('/')}`;
}

export function insideWorkspace(absolute) {
  return absolute !== null && (absolute === WORKSPACE || absolute.startsWith(`${WORKSPACE}/`));
}

function checkPath(path) {
  if (typeof path !== 'string') {
    const error = new TypeError(
      `The "path" argument must be of type string. Received ${path === null ? 'null' : typeof path}`,
    );
    error.code = 'ERR_INVALID_ARG_TYPE';
    throw error;
  }
}

/** Resolve `path` to [preopen descriptor, relative path, absolute path] or throw EACCES. */
function resolve(path, syscall) {
  checkPath(path);
  if (path === '') throw nodeError('ENOENT', syscall, path); // spec 6.2: a path is required
  const absolute = normalize(path);
  if (!insideWorkspace(absolute)) throw nodeError('EACCES', syscall, path);
  const relative = absolute === WORKSPACE ? '.' : absolute.slice(WORKSPACE.length + 1);
  return [workspaceRoot(syscall, path), relative, absolute];
}

/** Run a wasi call, converting its error code into a Node-style error. */
function wasi(syscall, path, action, dest) {
  try {
    return action();
  } catch (error) {
    const code = wasiCode(error);
    if (code === null) throw error;
    throw nodeError(WASI_CODES[code] || 'EIO', syscall, path, dest);
  }
}

function statRelative(dir, relative, follow) {
  return dir.statAt({ symlinkFollow: follow }, relative);
}

function tryStat(dir, relative, follow) {
  try {
    return statRelative(dir, relative, follow);
  } catch (error) {
    if (wasiCode(error) === null) throw error;
    return null;
  }
}

function toBytes(data) {
  if (typeof data === 'string') {
    // UTF-8 never takes fewer bytes than UTF-16 units: fewer means the engine could not
    // allocate them (it returns an empty array then), and an empty file must not be written.
    const bytes = encoder.encode(data);
    if (bytes.length < data.length) throw new RangeError('out of memory encoding the data');
    return bytes;
  }
  if (data instanceof Uint8Array) return data;
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return encoder.encode(String(data));
}

function encodingOf(options) {
  if (typeof options === 'string') return options;
  if (options && typeof options === 'object' && typeof options.encoding === 'string') {
    return options.encoding;
  }
  return null;
}

function readAll(file) {
  const chunks = [];
  let total = 0;
  let offset = 0n;
  for (;;) {
    const [bytes, end] = file.read(CHUNK, offset);
    if (bytes.length) {
      chunks.push(bytes);
      total += bytes.length;
      offset += BigInt(bytes.length);
    }
    if (end || bytes.length === 0) break;
  }
  const all = new Uint8Array(total);
  let position = 0;
  for (const chunk of chunks) {
    all.set(chunk, position);
    position += chunk.length;
  }
  return all;
}

function writeAll(file, bytes, start) {
  let offset = 0;
  while (offset < bytes.length) {
    const written = Number(file.write(bytes.subarray(offset), BigInt(start + offset)));
    if (written <= 0) break;
    offset += written;
  }
}

// All or nothing, as the reference's host-side fs: the host writes one call whole or
// refuses it (EFBIG, ENOSPC), the file is cut to size only once written, and a file this
// call created is removed again when the write fails.
function writeFile(path, data, append, syscall) {
  const [dir, relative] = resolve(path, syscall);
  const bytes = toBytes(data);
  const before = tryStat(dir, relative, true);
  if (before !== null && before.type === 'directory') throw nodeError('EISDIR', syscall, path);
  const existed = before !== null;
  const file = wasi(syscall, path, () =>
    dir.openAt({ symlinkFollow: true }, relative, { create: true }, { write: true }),
  );
  try {
    const start = append ? Number(wasi(syscall, path, () => file.stat()).size) : 0;
    wasi(syscall, path, () => {
      writeAll(file, bytes, start);
      if (!append) file.setSize(BigInt(bytes.length));
    });
  } catch (error) {
    if (!existed) {
      try {
        dir.unlinkFileAt(relative);
      } catch (ignored) {
        // the error being reported matters more
      }
    }
    throw error;
  } finally {
    dispose(file);
  }
  return null;
}

function listNames(dir, relative, path, syscall) {
  const handle =
    relative === '.'
      ? dir
      : wasi(syscall, path, () =>
          dir.openAt({ symlinkFollow: true }, relative, { directory: true }, { read: true }),
        );
  const stream = wasi(syscall, path, () => handle.readDirectory());
  const entries = [];
  try {
    for (;;) {
      const entry = wasi(syscall, path, () => stream.readDirectoryEntry());
      if (!entry) break;
      entries.push(entry);
    }
  } finally {
    dispose(stream);
    if (handle !== dir) dispose(handle);
  }
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return entries;
}

function makeStats(stat) {
  const time = stat.dataModificationTimestamp;
  const type = stat.type;
  // A directory's time is 0, as the workspace's stat reports it (spec 6.3).
  const mtimeMs =
    time && type !== 'directory'
      ? Number(time.seconds) * 1000 + Math.floor(time.nanoseconds / 1e6)
      : 0;
  const stats = { size: Number(stat.size), mtimeMs };
  Object.defineProperties(stats, {
    isFile: { value: () => type === 'regular-file' },
    isDirectory: { value: () => type === 'directory' },
    isSymbolicLink: { value: () => type === 'symbolic-link' },
  });
  return stats;
}

function makeDirent(entry) {
  const dirent = { name: entry.name };
  Object.defineProperties(dirent, {
    isFile: { value: () => entry.type === 'regular-file' },
    isDirectory: { value: () => entry.type === 'directory' },
    isSymbolicLink: { value: () => entry.type === 'symbolic-link' },
  });
  return dirent;
}

function removeTree(dir, relative, path) {
  for (const entry of listNames(dir, relative, path, 'rm')) {
    const child = `${relative}/${entry.name}`;
    if (entry.type === 'directory') removeTree(dir, child, path);
    else wasi('rm', path, () => dir.unlinkFileAt(child));
  }
  wasi('rm', path, () => dir.removeDirectoryAt(relative));
}

export const fs = {
  readFileSync(path, options) {
    const [dir, relative] = resolve(path, 'open');
    const file = wasi('open', path, () =>
      dir.openAt({ symlinkFollow: true }, relative, {}, { read: true }),
    );
    let bytes;
    try {
      const stat = wasi('read', path, () => file.stat());
      if (stat.type === 'directory') throw nodeError('EISDIR', 'read', path);
      bytes = wasi('read', path, () => readAll(file));
    } finally {
      dispose(file);
    }
    const encoding = encodingOf(options);
    if (encoding === null) return bytes;
    const name = encoding.toLowerCase();
    // Spec 7.8: a string for utf8/utf-8, else bytes (no other Node encodings).
    if (name === 'utf8' || name === 'utf-8') return decoder.decode(bytes);
    return bytes;
  },

  writeFileSync(path, data) {
    return writeFile(path, data, false, 'open');
  },

  appendFileSync(path, data) {
    return writeFile(path, data, true, 'open');
  },

  readdirSync(path, options) {
    const [dir, relative] = resolve(path, 'scandir');
    const stat = wasi('scandir', path, () => statRelative(dir, relative, true));
    if (stat.type !== 'directory') throw nodeError('ENOTDIR', 'scandir', path);
    const entries = listNames(dir, relative, path, 'scandir');
    if (options && typeof options === 'object' && options.withFileTypes) {
      return entries.map(makeDirent);
    }
    return entries.map((entry) => entry.name);
  },

  mkdirSync(path, options) {
    const [dir, relative, absolute] = resolve(path, 'mkdir');
    const recursive = Boolean(options && typeof options === 'object' && options.recursive);
    if (!recursive) {
      wasi('mkdir', path, () => dir.createDirectoryAt(relative));
      return null;
    }
    if (relative === '.') return null;
    const parts = absolute.slice(WORKSPACE.length + 1).split('/');
    for (let index = 1; index <= parts.length; index++) {
      const prefix = parts.slice(0, index).join('/');
      const stat = tryStat(dir, prefix, true);
      if (stat === null) wasi('mkdir', path, () => dir.createDirectoryAt(prefix));
      else if (stat.type !== 'directory') {
        throw nodeError(index === parts.length ? 'EEXIST' : 'ENOTDIR', 'mkdir', path);
      }
    }
    return null;
  },

  rmSync(path, options) {
    const [dir, relative] = resolve(path, 'rm');
    if (relative === '.') throw nodeError('EACCES', 'rm', path); // the root stays (spec 4.2)
    const recursive = Boolean(options && options.recursive);
    const force = Boolean(options && options.force);
    const stat = tryStat(dir, relative, false);
    if (stat === null) {
      if (force) return null;
      throw nodeError('ENOENT', 'rm', path);
    }
    if (stat.type === 'directory') {
      if (!recursive) throw nodeError('EISDIR', 'rm', path);
      removeTree(dir, relative, path);
    } else {
      wasi('rm', path, () => dir.unlinkFileAt(relative));
    }
    return null;
  },

  unlinkSync(path) {
    const [dir, relative] = resolve(path, 'unlink');
    if (relative === '.') throw nodeError('EACCES', 'unlink', path);
    wasi('unlink', path, () => dir.unlinkFileAt(relative));
    return null;
  },

  rmdirSync(path) {
    const [dir, relative] = resolve(path, 'rmdir');
    if (relative === '.') throw nodeError('EACCES', 'rmdir', path);
    wasi('rmdir', path, () => dir.removeDirectoryAt(relative));
    return null;
  },

  renameSync(from, to) {
    checkPath(from);
    checkPath(to);
    const source = normalize(from);
    const target = normalize(to);
    if (!insideWorkspace(source) || !insideWorkspace(target)) {
      throw nodeError('EACCES', 'rename', from, to);
    }
    const [dir, relativeFrom] = resolve(from, 'rename');
    const [, relativeTo] = resolve(to, 'rename');
    if (relativeFrom === '.' || relativeTo === '.') {
      throw nodeError('EACCES', 'rename', from, to); // the root stays (spec 4.2)
    }
    wasi('rename', from, () => dir.renameAt(relativeFrom, dir, relativeTo), to);
    return null;
  },

  existsSync(path) {
    if (typeof path !== 'string') return false;
    const absolute = normalize(path);
    if (!insideWorkspace(absolute)) return false;
    try {
      const [dir, relative] = resolve(path, 'access');
      if (tryStat(dir, relative, true) === null) return false;
      if (relative === '.') {
        // The root stays visible, as the cwd, when the File API is disabled, where spec
        // 6.7 has existsSync false: a listing, refused then, tells.
        dispose(dir.readDirectory());
      }
      return true;
    } catch {
      return false;
    }
  },

  statSync(path) {
    const [dir, relative] = resolve(path, 'stat');
    return makeStats(wasi('stat', path, () => statRelative(dir, relative, true)));
  },

  lstatSync(path) {
    const [dir, relative] = resolve(path, 'lstat');
    return makeStats(wasi('lstat', path, () => statRelative(dir, relative, false)));
  },
};

/** The guest's working directory. */
export function getCwd() {
  return cwd;
}

/** Node's process.chdir: the target must be an existing directory under /workspace. */
export function chdir(path) {
  checkPath(path);
  const absolute = normalize(path);
  if (!insideWorkspace(absolute)) throw nodeError('EACCES', 'chdir', cwd, path);
  const [dir, relative] = resolve(path, 'chdir');
  const stat = tryStat(dir, relative, true);
  if (stat === null) throw nodeError('ENOENT', 'chdir', cwd, path);
  if (stat.type !== 'directory') throw nodeError('ENOTDIR', 'chdir', cwd, path);
  cwd = absolute;
}

/** Start a run in `path` (errors ignored, spec 7.4). */
export function resetCwd(path) {
  cwd = WORKSPACE;
  if (!path) return;
  try {
    chdir(path);
  } catch {
    cwd = WORKSPACE;
  }
}

/** The cwd to report after a run: itself if it is still a directory, else /workspace. */
export function reportedCwd() {
  try {
    const [dir, relative] = resolve(cwd, 'stat');
    const stat = tryStat(dir, relative, true);
    if (stat !== null && stat.type === 'directory') return cwd;
  } catch {
    // fall through
  }
  return WORKSPACE;
}
