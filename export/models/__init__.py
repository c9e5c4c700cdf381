"""export.models"""
