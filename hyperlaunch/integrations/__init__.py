"""The trainers people already use, told about the job in one line of their script: a callback
for transformers' Trainer (hyperlaunch.integrations.transformers) and for Lightning
(hyperlaunch.integrations.lightning). Each imports its framework only when its callback is first
named, and hyperlaunch's runtime library beside it: a script without the framework imports
nothing heavy, and the job's bundle carries them into a container without hyperlaunch installed.
What every script gets without them (its working folder, its framework's checkpoints counted and
resumed from) is the job's: docs/your-script.md."""
