"""memtrack"""
