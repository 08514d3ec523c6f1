//! IPFIX (RFC 7011) export of flow records over UDP, TCP and to files (RFC 5655)
