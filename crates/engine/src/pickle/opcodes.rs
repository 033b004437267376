//! The pickle opcodes the machine runs, under the names CPython's `pickletools` gives them.

// Stack and MARK.

/// Pushes a MARK: the start of the items a later opcode collects.
pub const MARK: u8 = b'(';
/// Ends the stream, returning the top of the stack.
pub const STOP: u8 = b'.';
/// Discards the top of the stack.
pub const POP: u8 = b'0';
/// Discards everything down to and including the topmost MARK.
pub const POP_MARK: u8 = b'1';
/// Pushes the top of the stack again.
pub const DUP: u8 = b'2';

// Constants and numbers.

/// Pushes `None`.
pub const NONE: u8 = b'N';
/// Pushes `True` (protocol 2).
pub const NEWTRUE: u8 = 0x88;
/// Pushes `False` (protocol 2).
pub const NEWFALSE: u8 = 0x89;
/// An integer as a decimal line; `01`/`00` mean `True`/`False`.
pub const INT: u8 = b'I';
/// A signed 4-byte little-endian integer.
pub const BININT: u8 = b'J';
/// An unsigned 1-byte integer.
pub const BININT1: u8 = b'K';
/// An unsigned 2-byte little-endian integer.
pub const BININT2: u8 = b'M';
/// An integer as a decimal line, optionally suffixed `L`.
pub const LONG: u8 = b'L';
/// A two's-complement little-endian integer of a 1-byte length.
pub const LONG1: u8 = 0x8a;
/// A two's-complement little-endian integer of a signed 4-byte length.
pub const LONG4: u8 = 0x8b;
/// A float as a decimal line.
pub const FLOAT: u8 = b'F';
/// A big-endian 8-byte float.
pub const BINFLOAT: u8 = b'G';

// Strings and bytes.

/// A Python 2 `str` as a quoted `repr` line.
pub const STRING: u8 = b'S';
/// A Python 2 `str` of a signed 4-byte length.
pub const BINSTRING: u8 = b'T';
/// A Python 2 `str` of a 1-byte length.
pub const SHORT_BINSTRING: u8 = b'U';
/// Text as a `raw-unicode-escape` line.
pub const UNICODE: u8 = b'V';
/// UTF-8 text of a 4-byte length.
pub const BINUNICODE: u8 = b'X';
/// UTF-8 text of a 1-byte length (protocol 4).
pub const SHORT_BINUNICODE: u8 = 0x8c;
/// UTF-8 text of an 8-byte length (protocol 4).
pub const BINUNICODE8: u8 = 0x8d;
/// Bytes of a 4-byte length (protocol 3).
pub const BINBYTES: u8 = b'B';
/// Bytes of a 1-byte length (protocol 3).
pub const SHORT_BINBYTES: u8 = b'C';
/// Bytes of an 8-byte length (protocol 4).
pub const BINBYTES8: u8 = 0x8e;
/// A `bytearray` of an 8-byte length (protocol 5).
pub const BYTEARRAY8: u8 = 0x96;

// Containers.

/// Pushes `()`.
pub const EMPTY_TUPLE: u8 = b')';
/// Pushes `[]`.
pub const EMPTY_LIST: u8 = b']';
/// Pushes `{}`.
pub const EMPTY_DICT: u8 = b'}';
/// Pushes `set()` (protocol 4).
pub const EMPTY_SET: u8 = 0x8f;
/// A tuple of the items above the topmost MARK.
pub const TUPLE: u8 = b't';
/// A tuple of the top item (protocol 2).
pub const TUPLE1: u8 = 0x85;
/// A tuple of the top two items (protocol 2).
pub const TUPLE2: u8 = 0x86;
/// A tuple of the top three items (protocol 2).
pub const TUPLE3: u8 = 0x87;
/// A list of the items above the topmost MARK.
pub const LIST: u8 = b'l';
/// A dict of the key, value pairs above the topmost MARK.
pub const DICT: u8 = b'd';
/// A frozenset of the items above the topmost MARK (protocol 4).
pub const FROZENSET: u8 = 0x91;
/// Appends the top item to the list below it.
pub const APPEND: u8 = b'a';
/// Extends the list below the topmost MARK with the items above it.
pub const APPENDS: u8 = b'e';
/// Adds the items above the topmost MARK to the set below it (protocol 4).
pub const ADDITEMS: u8 = 0x90;
/// Sets the top key, value pair on the dict below it.
pub const SETITEM: u8 = b's';
/// Sets the key, value pairs above the topmost MARK on the dict below it.
pub const SETITEMS: u8 = b'u';

// Memo.

/// Stores the top of the stack under a decimal-line key.
pub const PUT: u8 = b'p';
/// Stores the top of the stack under a 1-byte key.
pub const BINPUT: u8 = b'q';
/// Stores the top of the stack under a 4-byte key.
pub const LONG_BINPUT: u8 = b'r';
/// Stores the top of the stack under the next free key (protocol 4).
pub const MEMOIZE: u8 = 0x94;
/// Pushes the value stored under a decimal-line key.
pub const GET: u8 = b'g';
/// Pushes the value stored under a 1-byte key.
pub const BINGET: u8 = b'h';
/// Pushes the value stored under a 4-byte key.
pub const LONG_BINGET: u8 = b'j';

// Names, calls and object state.

/// A global named by two lines, module then attribute.
pub const GLOBAL: u8 = b'c';
/// A global named by the two strings on top of the stack (protocol 4).
pub const STACK_GLOBAL: u8 = 0x93;
/// A global from the copyreg extension registry, by a 1-byte code (protocol 2).
pub const EXT1: u8 = 0x82;
/// A global from the copyreg extension registry, by a 2-byte code (protocol 2).
pub const EXT2: u8 = 0x83;
/// A global from the copyreg extension registry, by a 4-byte code (protocol 2).
pub const EXT4: u8 = 0x84;
/// Calls the callable below the top with the argument tuple on top.
pub const REDUCE: u8 = b'R';
/// `cls.__new__(cls, *args)` (protocol 2).
pub const NEWOBJ: u8 = 0x81;
/// `cls.__new__(cls, *args, **kwargs)` (protocol 4).
pub const NEWOBJ_EX: u8 = 0x92;
/// Instantiates a class named by two lines with the items above the topmost MARK.
pub const INST: u8 = b'i';
/// Instantiates the class just above the topmost MARK with the items after it.
pub const OBJ: u8 = b'o';
/// Sets the top of the stack as the state of the object below it.
pub const BUILD: u8 = b'b';
/// A persistent id as a line.
pub const PERSID: u8 = b'P';
/// A persistent id taken from the top of the stack.
pub const BINPERSID: u8 = b'Q';

// Protocol, framing and out-of-band buffers.

/// Names the protocol version (protocol 2).
pub const PROTO: u8 = 0x80;
/// Announces the length of the next frame (protocol 4).
pub const FRAME: u8 = 0x95;
/// Pushes an out-of-band buffer (protocol 5).
pub const NEXT_BUFFER: u8 = 0x97;
/// Marks the buffer on top of the stack read-only (protocol 5).
pub const READONLY_BUFFER: u8 = 0x98;
