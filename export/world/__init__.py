"""export.world"""
