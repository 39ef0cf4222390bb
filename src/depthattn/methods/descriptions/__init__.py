"""Each method's description, importing no torch: its config fields, variants, capabilities and costs
(`MethodDescription`, base.py), read by the config, the presets and `--help` through the registry
(`depthattn.methods.DESCRIPTIONS`); its module, in methods/, derives from it."""
