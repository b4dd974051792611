"""The host: environment capture, the only NVML importer (`gpu`), host-to-device bandwidth, and the
process trees a measurement accounts for."""
