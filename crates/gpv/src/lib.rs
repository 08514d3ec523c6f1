//! grouped packet vectors (*Flow): the GPV cache, its encoding, and late-bound metric apps
